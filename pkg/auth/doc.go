// Package auth owns gpuq's security material and who may do what:
//
//   - the roles (Roles) and the NATS permissions of each, written as a
//     nats-server configuration with one nkey user per role (Init); the
//     server enforces them, gpuq only generates them;
//   - credentials files: an nkey seed per role, with the role's name, its
//     inbox prefix and its team in comment lines (LoadCreds), which the
//     services and the CLI turn into connection options (Creds.Options);
//   - the HTTP API's bearer tokens, one per team and one for the admin
//     (LoadTokens, Tokens.Caller);
//   - TLS settings for NATS and HTTP (TLSFiles).
//
// No cryptography is implemented here: keys are nkeys (ed25519, from
// github.com/nats-io/nkeys), tokens are 32 bytes of crypto/rand compared
// in constant time, TLS is crypto/tls.
package auth
