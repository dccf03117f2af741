package testutil

import (
	"testing"
	"time"
)

// Eventually polls f until it reports done, failing the test on an error that comes
// with done (a failure, not a wait) or after two minutes. It is for state a real
// server applies in the background (Milvus grants and logins), which a test cannot
// be told about.
func Eventually(t testing.TB, what string, f func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		done, err := f()
		if done {
			if err != nil {
				t.Fatalf("%s: %v", what, err)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: still waiting after two minutes: %v", what, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
