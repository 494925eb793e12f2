package tokens

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"time"

	"github.com/quotaware/throttle/internal/apipath"
)

// salt separates these derivations from any other use of the same secret.
var salt = []byte("throttle/tokens/v1")

// keys are what one credential derives: the Redis key that names its
// kept answer, the key of the tokens' hashes, and the AES key that seals
// the answer. None can be found from the others or from Redis.
type keys struct {
	name string // hex, the Redis key's suffix
	tag  []byte // HMAC key of the hash a kept answer is deleted by
	aead cipher.AEAD
}

// derive returns the keys of a credential presented to provider at path.
// The host is left out: a provider serves one credential's tokens from
// several hosts (WeChat's api., api2., sh.api., sz.api. and
// hk.api.weixin.qq.com), and a key per host kept one token per host, each
// fetch invalidating the others'. Every value is length-prefixed, so no
// two credentials encode alike.
func derive(provider, path string, cred []string) (*keys, error) {
	var ikm []byte
	// One credential is one key however the path is spelled.
	for _, v := range append([]string{provider, apipath.Clean(path)}, cred...) {
		ikm = binary.BigEndian.AppendUint32(ikm, uint32(len(v)))
		ikm = append(ikm, v...)
	}
	prk, err := hkdf.Extract(sha256.New, ikm, salt)
	if err != nil {
		return nil, err
	}
	name, err := hkdf.Expand(sha256.New, prk, "name", 16)
	if err != nil {
		return nil, err
	}
	tag, err := hkdf.Expand(sha256.New, prk, "tag", 32)
	if err != nil {
		return nil, err
	}
	key, err := hkdf.Expand(sha256.New, prk, "aes-256-gcm", 32)
	if err != nil {
		return nil, err
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	return &keys{name: hex.EncodeToString(name), tag: tag, aead: aead}, nil
}

// tagLen is the length of a token's keyed hash at the head of a kept value.
const tagLen = 16

// tagOf is the keyed hash of token a kept answer is deleted by.
func (k *keys) tagOf(token string) []byte {
	m := hmac.New(sha256.New, k.tag)
	m.Write([]byte(token))
	return m.Sum(nil)[:tagLen]
}

// seal returns the value kept in Redis for an answer fetched at fetched:
// the token's keyed hash, then the nonce, then the sealed fetch time and
// body. The Redis key is the additional data, so a value moved to another
// key does not open.
func (k *keys) seal(redisKey, token string, fetched time.Time, answer []byte) ([]byte, error) {
	plain := binary.BigEndian.AppendUint64(make([]byte, 0, 8+len(answer)), uint64(fetched.UnixMilli()))
	plain = append(plain, answer...)
	out := make([]byte, 0, tagLen+k.aead.NonceSize()+len(plain)+k.aead.Overhead())
	out = append(out, k.tagOf(token)...)
	nonce := make([]byte, k.aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return nil, err
	}
	out = append(out, nonce...)
	return k.aead.Seal(out, nonce, plain, []byte(redisKey)), nil
}

var errSealed = errors.New("tokens: kept answer does not open")

// open reads a value seal returned: the fetch time and the answer.
func (k *keys) open(redisKey string, v []byte) (time.Time, []byte, error) {
	ns := k.aead.NonceSize()
	if len(v) < tagLen+ns+k.aead.Overhead()+8 {
		return time.Time{}, nil, errSealed
	}
	plain, err := k.aead.Open(nil, v[tagLen:tagLen+ns], v[tagLen+ns:], []byte(redisKey))
	if err != nil || len(plain) < 8 {
		return time.Time{}, nil, errSealed
	}
	return time.UnixMilli(int64(binary.BigEndian.Uint64(plain))), plain[8:], nil
}
