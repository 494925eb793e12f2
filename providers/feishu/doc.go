// Package feishu is the preset profile for the Feishu / Lark open platform
// (open.feishu.cn and open.larksuite.com, paths /open-apis/...).
//
// Feishu limits each API per app by a frequency level: a per-second cap, a
// per-minute cap, or both (level 4: 1000/min and 50/s). Each API's page states
// its level, so the profile holds a table of API patterns and levels, with a
// default level for the rest. A request's API is its template in Feishu's API
// catalog (generated from the Lark SDK, catalog_gen.go) or in App.APIs; a
// path in neither is counted as one stand-in API per method, "METHOD
// uncatalogued". Sending IM messages adds 5/s to one chat or user, named by
// receive_id in the request body: Route reads a bounded prefix of that body
// for it. A reply names only the message it answers: the preset learns each
// message's chat from the answers that pass through it (messages.go) and
// counts a reply to a known message against its chat. The free edition also
// caps a tenant's calls per calendar month.
//
// Throttled calls answer HTTP 429 (some old APIs 400) with code 99991400 and
// the x-ogw-ratelimit-reset header, the seconds to wait; the monthly quota
// answers 429 too, with 99991403, and lasts until the 1st of next month: the
// status alone never means "retry soon", so Classify reads the code.
package feishu
