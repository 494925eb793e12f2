// Package bodyscan reads the members of a request's JSON body that name a
// limited entity (a Feishu recipient, a WeCom member list and app) the way
// the provider's server may read them, so that no way of writing a body
// lets a request reach an entity without being charged to it.
package bodyscan
