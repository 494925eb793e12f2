// Package entityhash names the entities a provider limits on their own (a
// WeCom member, a Feishu chat or user, a DingTalk robot) in rule keys and
// penalty scopes, which live in Redis, without their IDs.
//
// An unkeyed hash of a user ID ("alice", an email) is reversed by hashing
// a dictionary of guesses; the hash is therefore an HMAC under a key that
// every replica shares and a reader of Redis does not have: the preset's
// EntityKey. Without one the key is derived from the app's or company's ID,
// which is in the keys too: no better than unkeyed, so the presets document
// that EntityKey should be set.
package entityhash
