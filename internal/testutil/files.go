package testutil

import (
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

// EachFile calls fn with the slash-separated path below dir and the contents of every
// file under dir (a fixture package to upload, say); it fails the test on any error.
func EachFile(t testing.TB, dir string, fn func(rel string, data []byte)) {
	t.Helper()
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		fn(filepath.ToSlash(rel), b)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
