package auth

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// AccountKey is the public key of the gpuq account of the auth directory
// dir (Init's AccountName): the NATS account every role is a user of,
// under which the server keeps JetStream's data (<store>/jetstream/<key>;
// without auth the global account's, "$G"). Rotate keeps it.
func AccountKey(dir string) (string, error) {
	conf, err := os.ReadFile(filepath.Join(dir, ConfigFile))
	if err != nil {
		return "", err
	}
	_, sys, accounts, err := parseServerConfig(string(conf))
	if err != nil {
		return "", fmt.Errorf("%s: %w", filepath.Join(dir, ConfigFile), err)
	}
	for key := range accounts {
		if key != sys {
			return key, nil
		}
	}
	return "", errors.New(filepath.Join(dir, ConfigFile) + ": no gpuq account in it")
}
