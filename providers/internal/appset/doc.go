// Package appset serves many apps of one provider through one profile: the
// presets' Config.Apps, Default and Unknown are built on it.
package appset
