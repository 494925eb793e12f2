// Package strikes lengthens a scope's penalty when the provider's error
// comes back soon after the last penalty it gave ended: the providers whose
// answers state no end (WeCom's 45009, DingTalk's 90002) imply a ladder of
// lengths, which a Book climbs per scope.
package strikes
