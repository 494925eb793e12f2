// Package routetest checks the property every preset's Route must have:
// the identifiers a path carries never change which API a request is, and
// never reach its API name, rule keys or scopes. Only tests import it.
package routetest
