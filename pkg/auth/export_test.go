package auth

// JobKeyName is the name Rotate takes for node's job signing key.
func JobKeyName(node string) string { return "jobs-" + node }
