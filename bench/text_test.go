package bench

import (
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
)

func TestTextWords(t *testing.T) {
	tx := NewText()
	a := tx.Words(rand.New(rand.NewPCG(1, 2)), 500)
	b := tx.Words(rand.New(rand.NewPCG(1, 2)), 500)
	if a != b {
		t.Fatal("same seed, different text")
	}
	if n := len(strings.Fields(a)); n != 500 {
		t.Fatalf("%d words, want 500", n)
	}
	if !strings.HasSuffix(a, ".") {
		t.Fatal("text should end a sentence")
	}
}

func TestTextCalibrate(t *testing.T) {
	tx := NewText()
	// A counter that sees two tokens per word.
	if err := tx.Calibrate(func(s string) (int, error) { return 2 * len(strings.Fields(s)), nil }); err != nil {
		t.Fatal(err)
	}
	if tx.TokensPerWord != 2 {
		t.Fatalf("ratio %v, want 2", tx.TokensPerWord)
	}
	if n := len(strings.Fields(tx.ForTokens(rand.New(rand.NewPCG(3, 4)), 1000))); n != 500 {
		t.Fatalf("1000 tokens at 2 tokens/word gave %d words, want 500", n)
	}
	boom := errors.New("boom")
	if err := tx.Calibrate(func(string) (int, error) { return 0, boom }); !errors.Is(err, ErrCalibration) || !errors.Is(err, boom) {
		t.Fatalf("calibration error: %v", err)
	}
	if err := tx.Calibrate(func(string) (int, error) { return 0, nil }); !errors.Is(err, ErrCalibration) {
		t.Fatalf("zero tokens: %v", err)
	}
	if tx.TokensPerWord != 2 {
		t.Fatal("a failed calibration changed the ratio")
	}
}
