// Package penaltytime holds the presets' clock arithmetic: Beijing time, in
// which the Chinese platforms state penalty ends and reset their quotas, the
// ends of fixed windows, and the reading of reset headers and penalty ends
// written in messages.
package penaltytime
