// Package appset serves many apps of one provider through one profile: the
// presets' Apps types are built on it.
package appset
