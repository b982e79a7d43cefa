package bench

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
)

// vocabulary is the word list generated text is drawn from: common English words that
// byte-level BPE vocabularies hold as one token each with their leading space, so a text's
// token count follows its word count closely. Calibrate measures the exact ratio.
var vocabulary = strings.Fields(`
the of and to in is was for on that with as by at from his her they this have are not
but had which one were all their there been has when who will more if out so said what
about its into than them can only other new some could time these two may then first any
like now such our over man even most made after also did many before must through back
years where much your way well down should because each just those people how too little
state good very make world still own see men work long get here between both life being
under never day same another know while last might great old year off come since against
go came right used take three states himself few house use during without again place
around however home small found thought went say part once general high upon school every
does got united left number course war until always away something fact though water less
public put think almost hand enough far took head yet government system better set told
nothing night end why called did find going look asked later knew point next program city
business give group toward young days let room president side social given present several
order national possible rather second face per among form important often things looked
early white case john become large big need four within felt along children saw best church
ever least power development light thing seemed family interest want members mind country
area others done turned although open god service certain kind problem began different door
thus help sense means whole matter perhaps itself york times law human line above name
example action company hands local show whether five history gave today either act feet
across taken past quite anything seen having death experience body word half really week
field car words already themselves information tell together college shall money period held
keep sure probably free seems political real behind cannot miss question air office making
brought whose special major heard problems federal became study ago moment available known
result street economic boy position reason change south board individual job society areas
west close turn love community true court force full seem wife future age voice center woman
control common policy necessary following front sometimes six girl clear further land run
students provide feel party able mother music education university child effect level stood
military town short morning total outside rate figure class art century washington north
usually leave therefore evidence percent black strong value private read police market
`)

// ErrCalibration is returned when the tokens-per-word ratio cannot be measured.
var ErrCalibration = errors.New("bench: text calibration failed")

// Text generates deterministic filler text whose token count is controlled through a
// measured tokens-per-word ratio.
type Text struct {
	// TokensPerWord is the measured ratio (1.0 until calibrated).
	TokensPerWord float64
}

// NewText returns a generator with ratio 1 token per word; call Calibrate to measure it.
func NewText() *Text { return &Text{TokensPerWord: 1} }

// Words returns n words drawn from the vocabulary with r, separated by spaces, with a
// sentence break every 12 to 20 words so the text reads like prose to a tokenizer.
func (t *Text) Words(r *rand.Rand, n int) string {
	var b strings.Builder
	b.Grow(n * 7)
	sentence := 0
	next := 12 + r.IntN(9)
	for i := 0; i < n; i++ {
		w := vocabulary[r.IntN(len(vocabulary))]
		if i > 0 {
			b.WriteByte(' ')
		}
		if sentence == 0 {
			b.WriteString(strings.ToUpper(w[:1]))
			b.WriteString(w[1:])
		} else {
			b.WriteString(w)
		}
		sentence++
		if sentence == next || i == n-1 {
			b.WriteByte('.')
			sentence = 0
			next = 12 + r.IntN(9)
		}
	}
	return b.String()
}

// ForTokens returns text of about tokens tokens: the word count is tokens/TokensPerWord.
func (t *Text) ForTokens(r *rand.Rand, tokens int) string {
	if tokens <= 0 {
		return ""
	}
	n := int(float64(tokens)/t.TokensPerWord + 0.5)
	if n < 1 {
		n = 1
	}
	return t.Words(r, n)
}

// Calibrate measures TokensPerWord by counting the tokens of a fixed 20,000-word sample
// with count (normally a tokenizer's Encode without special tokens).
func (t *Text) Calibrate(count func(string) (int, error)) error {
	const words = 20000
	r := rand.New(rand.NewPCG(0x6b76726f, 0x75746531))
	sample := t.Words(r, words)
	n, err := count(sample)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrCalibration, err)
	}
	if n <= 0 {
		return fmt.Errorf("%w: sample of %d words counted %d tokens", ErrCalibration, words, n)
	}
	t.TokensPerWord = float64(n) / words
	return nil
}
