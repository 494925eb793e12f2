// Package loadtest is the harness the presets' acceptance tests and the
// soak share:
// several replicas of a service, each its own Transport with its own go-redis
// client on one shared redis-server, fire calls with Poisson arrivals at a
// multiple of a provider's published rate; the callers' outcomes are tallied
// and the emulator's record of successes is turned into rates.
//
// It exists so that the DingTalk, WeChat, WeCom and Feishu tests and the
// soak measure the same way instead of each keeping a copy of the same
// machinery. What is a
// provider's own stays in its test: how a call is built and its answer read,
// which codes are quota errors, how the emulator's record is filtered and
// how the emulator's time is scaled. Only tests import it.
package loadtest
