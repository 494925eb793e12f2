// Package exchanges describes the providers' token exchanges once: which
// request is one, the app (and org or tenant) it names, the credential it
// presents, and how its answer states success, tokens and lifetime. Package
// apps reads it to charge an exchange to its app and learn whose token it
// hands out; package tokens to share exchanges between replicas.
package exchanges
