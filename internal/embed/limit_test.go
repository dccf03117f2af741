package embed

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestLimitPrepare(t *testing.T) {
	long := strings.Repeat("zoë ユーザー 用户 ", 100) // 1-, 2- and 3-byte characters
	for _, max := range []int{1, 2, 3, 4, 5, 17, 100, 101, 102, 103, len(long) - 1} {
		got, truncated, err := Limit{MaxInputBytes: max, Overflow: Truncate}.Prepare("m1", long)
		if err != nil || !truncated {
			t.Fatalf("max %d: %v %v", max, truncated, err)
		}
		if len(got) > max || len(got) < max-utf8.UTFMax+1 || !utf8.ValidString(got) || !strings.HasPrefix(long, got) {
			t.Errorf("max %d: got %d bytes %q: want the longest valid prefix of at most %d bytes", max, len(got), got, max)
		}
		again, _, _ := Limit{MaxInputBytes: max, Overflow: Truncate}.Prepare("other", long)
		if again != got {
			t.Errorf("max %d: not deterministic", max)
		}
	}
	// What fits is sent as is, under any policy; no limit sends everything.
	for _, l := range []Limit{{MaxInputBytes: len(long), Overflow: Refuse}, {MaxInputBytes: len(long), Overflow: Truncate}, {}} {
		if got, truncated, err := l.Prepare("m1", long); got != long || truncated || err != nil {
			t.Errorf("%+v: a text that fits came back changed (%v, %v)", l, truncated, err)
		}
	}
	// Refuse (and no policy): a typed error naming the input and the sizes, never the text.
	for _, o := range []Overflow{Refuse, ""} {
		_, _, err := Limit{MaxInputBytes: 100, Overflow: o}.Prepare("m1", long)
		var tl *TextTooLongError
		if !errors.As(err, &tl) || !errors.Is(err, ErrTextTooLong) || tl.ID != "m1" || tl.Bytes != len(long) || tl.Max != 100 {
			t.Fatalf("overflow %q: %v", o, err)
		}
		if strings.Contains(err.Error(), "ユーザー") {
			t.Errorf("the error holds the text: %v", err)
		}
	}
	if err := (Limit{MaxInputBytes: 10, Overflow: "Cut"}).Validate(); err == nil {
		t.Error("Validate accepted overflow Cut")
	}
	if err := (Limit{MaxInputBytes: -1}).Validate(); err == nil {
		t.Error("Validate accepted a negative limit")
	}
}
