// Package auth owns gpuq's security material and who may do what:
//
//   - the roles (Roles) and the NATS permissions of each, written with
//     NATS's decentralised authentication (Init): an operator, the system
//     account and the gpuq account, one user JWT per role carrying its
//     permissions, and a nats-server configuration (operator,
//     system_account, a memory resolver preloaded with the account JWTs);
//     the server enforces the permissions, gpuq only generates them;
//   - credentials files: a .creds file (user JWT and seed, as the nats
//     CLI reads them) per role, with the role's name, its inbox prefix and
//     its team in comment lines (LoadCreds), which the services and the
//     CLI turn into connection options (Creds.Options); a bare .nk user
//     seed still loads, for a server configured with nkey users;
//   - the jobs' own credentials: each agent has a scoped signing key of
//     the gpuq account (LoadJobSigner) whose template is JobRole; at a
//     task's start it mints a user JWT named after the task (MintJob) that
//     may ask the submitter for that run's checkpoint and history and
//     nothing else;
//   - the HTTP API's bearer tokens, one per team and one for the admin
//     (LoadTokens, Tokens.Caller);
//   - TLS settings for NATS and HTTP (TLSFiles).
//
// No cryptography is implemented here: keys are nkeys (ed25519, from
// github.com/nats-io/nkeys), JWTs are github.com/nats-io/jwt/v2's, tokens
// are 32 bytes of crypto/rand compared in constant time, TLS is
// crypto/tls.
package auth
