// Package learnedhash is the one place that knows how the limits learned
// from providers' answers (providers.Learned) are stored in Redis: the
// group's hash "{prefix:group}:learned", field "<window> <API>"
// ("<window>@<app> <API>" for one app's limit, read from a quota
// endpoint), value "<limit>:<until, Unix ms>". The replicas write and read
// it (the root package's learned.go), and throttlectl shows it; both take a
// field as this package reads it, so that an operator is shown in force
// exactly what every replica applies.
package learnedhash
