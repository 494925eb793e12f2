// Package hostcheck checks the host entries of a preset's configuration
// when it is built: an entry written as a URL ("https://api.dingtalk.com")
// would match no request and turn the preset's protection off without a
// word.
package hostcheck
