// Package mediatype answers the presets' questions about a Content-Type:
// is it JSON, HTML, or worth peeking at for an error body.
package mediatype
