// Package dingtalk is the DingTalk (钉钉) preset: the limits of both API
// generations (oapi.dingtalk.com and api.dingtalk.com), the error codes that
// signal them, and their penalty windows.
//
// Every number comes from the provider's documentation or observed answers
// and is a Config field, so that a user can follow the platform when it
// changes its limits without waiting for a release.
package dingtalk
