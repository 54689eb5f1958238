package container

import (
	"encoding/json"
	"fmt"
	"os"
)

// writeJSON writes v as indented JSON to path (a bundle's config.json),
// readable by root alone.
func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "\t")
	if err != nil {
		return fmt.Errorf("encode %s: %w", path, err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
