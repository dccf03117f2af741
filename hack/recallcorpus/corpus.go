// Package recallcorpus generates the recall benchmark's corpus (make bench-recall): a
// multi-session conversation history of several speakers over six months, each turn a
// memory an agent would write (episodic for events and chat, semantic for stated facts,
// procedural for instructions), and questions labelled with the turns that answer them.
//
// It is data templates plus randomness, deterministic from a seed: facts stated once,
// facts restated later in other words, facts updated ("we moved from Hackney to
// Camden": the newest statement answers), events with names, dates, order numbers and
// amounts, distractors that share a question's words without answering it, and chat
// ("ok thanks", "哈哈好的"); English, Chinese, and speakers who mix both. Questions
// paraphrase their evidence (dense search should win), name a rare token (lexical
// should), ask about months-old turns under newer distractors, ask for updated facts,
// or gather several turns.
package recallcorpus

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"time"
)

// Defaults of Options.
const (
	DefaultSpeakers = 10
	DefaultSessions = 28
)

// Start and End bound the corpus's own time: turns are dated within them. A user of
// the corpus shifts them to end now (see Corpus.Shift): the texts never depend on the
// day the corpus is generated.
var (
	Start = time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC)
	End   = Start.AddDate(0, 6, 0)
)

// OldAge is how old (before End) all of a question's evidence must be for it to count
// as "old".
const OldAge = 120 * 24 * time.Hour

// Options size the corpus.
type Options struct {
	Seed uint64
	// Speakers is the number of scopes (default DefaultSpeakers).
	Speakers int
	// Sessions is the number of conversations per speaker (default DefaultSessions);
	// a session has about six turns.
	Sessions int
}

// Memory types, as the gateway names them.
const (
	Episodic   = "episodic"
	Semantic   = "semantic"
	Procedural = "procedural"
)

// Turn is one thing a speaker said: one memory.
type Turn struct {
	ID      string    `json:"id"`
	Scope   string    `json:"scope"`
	Session int       `json:"session"`
	At      time.Time `json:"at"`
	Type    string    `json:"memory_type"`
	Lang    string    `json:"lang"`
	Text    string    `json:"text"`
	// Fact names what a semantic or procedural turn states: a restatement shares its
	// original's; an update starts a new one.
	Fact string `json:"fact,omitempty"`
}

// Question is asked in one speaker's scope.
type Question struct {
	ID    string `json:"id"`
	Scope string `json:"scope"`
	Query string `json:"query"`
	Lang  string `json:"lang"`
	// Kinds tag it: paraphrase or rare, and any of updated, old, multi, crosslingual.
	Kinds []string `json:"kinds"`
	// Evidence lists what answers it: each unit is a set of turns any one of which
	// carries the answer (a fact and its restatements); a question may need several.
	Evidence [][]string `json:"evidence"`
}

// Corpus is the generated history and its questions.
type Corpus struct {
	Seed      uint64     `json:"seed"`
	Turns     []Turn     `json:"turns"`
	Questions []Question `json:"questions"`
}

// Scopes lists the corpus's scopes in order.
func (c *Corpus) Scopes() []string {
	var out []string
	for _, t := range c.Turns {
		if len(out) == 0 || out[len(out)-1] != t.Scope {
			out = append(out, t.Scope)
		}
	}
	return out
}

// SessionsFor is the number of sessions per speaker that gives about turns memories
// per scope (the benchmark's latency figure wants 1,000).
func SessionsFor(seed uint64, turns int) int {
	lo, hi := 1, max(2, turns/2)
	for lo < hi {
		mid := (lo + hi) / 2
		c := Generate(Options{Seed: seed, Speakers: 2, Sessions: mid})
		if len(c.Turns)/2 < turns {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return lo
}

// Shift is what to add to a turn's At so the corpus ends at now.
func Shift(now time.Time) time.Duration { return now.Sub(End) }

type gen struct {
	r *rand.Rand
	// used holds the rare tokens (dates, amounts, order numbers) the speaker has
	// drawn so far, so each answers one question.
	used map[string]bool
}

func pick[T any](g *gen, xs []T) T { return xs[g.r.IntN(len(xs))] }

// weightedKinds holds each event kind as often as its weight.
var weightedKinds = func() (out []eventKind) {
	for _, k := range eventKinds {
		for range max(1, k.weight) {
			out = append(out, k)
		}
	}
	return out
}()

// fresh draws from draw until it returns a token not used before.
func (g *gen) fresh(draw func() string) string {
	for {
		if s := draw(); !g.used[s] {
			g.used[s] = true
			return s
		}
	}
}

var monthsEN = []string{"January", "February", "March", "April", "May", "June", "July", "August", "September", "October", "November", "December"}

func (g *gen) date(lang string) string {
	return g.fresh(func() string {
		m, d := g.r.IntN(12), 1+g.r.IntN(28)
		if lang == "zh" {
			return fmt.Sprintf("%d月%d日", m+1, d)
		}
		return fmt.Sprintf("%s %d", monthsEN[m], d)
	})
}

func (g *gen) amount(lang string) string {
	return g.fresh(func() string {
		if lang == "zh" {
			return fmt.Sprintf("%d元", 30+g.r.IntN(4000))
		}
		return fmt.Sprintf("€%d.%02d", 8+g.r.IntN(900), g.r.IntN(100))
	})
}

func (g *gen) orderID() string {
	return g.fresh(func() string { return fmt.Sprintf("%c%d%04d", 'A'+rune(g.r.IntN(26)), 1+g.r.IntN(9), g.r.IntN(10000)) })
}

func join(xs []string) string { return strings.Join(xs, ",") }

// fill replaces {name} placeholders with vals.
func fill(tpl string, vals map[string]string) string {
	var pairs []string
	for k, v := range vals {
		pairs = append(pairs, "{"+k+"}", v)
	}
	return strings.NewReplacer(pairs...).Replace(tpl)
}

type speaker struct {
	id, scope, lang string
	friends         texts
}

type pturn struct {
	Turn
	sess int
}

type pquestion struct {
	Question
	evidence [][]*pturn
	// key is what the answer hinges on (empty for rare-token questions): a key shared
	// by two events makes the question ambiguous, and it is dropped.
	key string
}

// Generate makes the corpus of o.
func Generate(o Options) *Corpus {
	if o.Speakers <= 0 {
		o.Speakers = DefaultSpeakers
	}
	if o.Sessions <= 0 {
		o.Sessions = DefaultSessions
	}
	g := &gen{r: rand.New(rand.NewPCG(o.Seed, 0x5eed)), used: map[string]bool{}}
	c := &Corpus{Seed: o.Seed}
	for i := range o.Speakers {
		lang := [...]string{"en", "zh", "en", "zh", "mix"}[i%5]
		s := &speaker{id: fmt.Sprintf("s%02d", i+1), lang: lang, friends: texts{}}
		s.scope = "user:" + s.id
		for _, l := range []string{"en", "zh"} {
			f := slices.Clone(firstNames[l])
			g.r.Shuffle(len(f), func(a, b int) { f[a], f[b] = f[b], f[a] })
			s.friends[l] = f[:3]
		}
		g.used = map[string]bool{} // rare tokens need to be unique within a scope
		turns, qs := g.speaker(s, o.Sessions)
		c.Turns = append(c.Turns, turns...)
		c.Questions = append(c.Questions, qs...)
	}
	return c
}

// langOf is the language a turn of s is said in.
func (g *gen) langOf(s *speaker) string {
	if s.lang == "mix" {
		return pick(g, []string{"en", "zh"})
	}
	return s.lang
}

// say picks a template of t in lang; a mixed speaker's Chinese is code-switched
// where the templates have such lines.
func (g *gen) say(s *speaker, t texts, lang string) string {
	if s.lang == "mix" && lang == "zh" && len(t["mix"]) > 0 && g.r.IntN(2) == 0 {
		return pick(g, t["mix"])
	}
	return pick(g, t[lang])
}

// history is one speaker's corpus while it is made: turns per session, questions.
type history struct {
	g        *gen
	s        *speaker
	n        int // sessions
	sessions [][]*pturn
	starts   []time.Time
	qs       []*pquestion
	// keyCount counts the events each paraphrase question's answer hinges on.
	keyCount map[string]int
}

func (g *gen) speaker(s *speaker, nSessions int) ([]Turn, []Question) {
	h := &history{g: g, s: s, n: nSessions, sessions: make([][]*pturn, nSessions), starts: make([]time.Time, nSessions), keyCount: map[string]int{}}
	span := int(End.Sub(Start) / time.Minute)
	for i := range h.starts {
		h.starts[i] = Start.Add(time.Duration(g.r.IntN(span-24*60)) * time.Minute)
	}
	sort.Slice(h.starts, func(a, b int) bool { return h.starts[a].Before(h.starts[b]) })
	h.facts()
	h.events()
	h.chat()
	return h.finish()
}

func (h *history) add(sess int, typ, lang, text, fact string) *pturn {
	t := &pturn{Turn: Turn{Scope: h.s.scope, Type: typ, Lang: lang, Text: text, Fact: fact}, sess: sess}
	h.sessions[sess] = append(h.sessions[sess], t)
	return t
}

// after is a session after sess (the last when none is).
func (h *history) after(sess int) int {
	if sess >= h.n-1 {
		return h.n - 1
	}
	return sess + 1 + h.g.r.IntN(h.n-sess-1)
}

// lookalike adds a line echoing a rare question's wording, without its token.
func (h *history) lookalike(t texts, lang string) {
	if len(t[lang]) > 0 {
		h.add(h.g.r.IntN(h.n), Episodic, lang, pick(h.g, t[lang]), "")
	}
}

// ask adds a question from tpl ("!" first: a rare-token one) answered by evidence,
// said in evLang; key is what a paraphrase question's answer hinges on.
func (h *history) ask(qlang, tpl string, vals map[string]string, key, evLang string, evidence ...[]*pturn) *pquestion {
	q := &pquestion{evidence: evidence}
	q.Lang = qlang
	if strings.HasPrefix(tpl, "!") {
		q.Kinds = append(q.Kinds, "rare")
		tpl = tpl[1:]
	} else {
		q.Kinds = append(q.Kinds, "paraphrase")
		q.key = key
	}
	if evLang != qlang {
		q.Kinds = append(q.Kinds, "crosslingual")
	}
	q.Query = fill(tpl, vals)
	h.qs = append(h.qs, q)
	return q
}

// questionLang is the language the speaker asks in about something said in lang:
// mixed speakers sometimes ask in the other.
func (h *history) questionLang(lang string) string {
	if h.s.lang == "mix" && h.g.r.IntN(10) < 3 {
		return map[string]string{"en": "zh", "zh": "en"}[lang]
	}
	return lang
}

// facts states facts and procedures in the first 60% of the sessions, some restated
// and updated later.
func (h *history) facts() {
	procedures := 0
	for _, slot := range factSlots {
		if slot.procedural {
			if procedures >= 3 || h.g.r.IntN(5) < 2 {
				continue
			}
			procedures++
		} else if h.g.r.IntN(100) < 15 {
			continue
		}
		h.fact(slot)
	}
}

func (h *history) fact(slot factSlot) {
	g, s := h.g, h.s
	typ := Semantic
	if slot.procedural {
		typ = Procedural
	}
	lang := g.langOf(s)
	vals := slot.values(g, lang)
	si := g.r.IntN(max(1, h.n*6/10))
	unit := []*pturn{h.add(si, typ, lang, fill(g.say(s, slot.state, lang), vals), slot.name)}
	last := si
	if len(slot.restate) > 0 && g.r.IntN(100) < 45 {
		last = h.after(si)
		unit = append(unit, h.add(last, typ, lang, fill(g.say(s, slot.restate, lang), vals), slot.name))
	}
	kinds := []string(nil)
	if slot.updatable && last < h.n-1 && g.r.IntN(100) < 65 {
		old := vals[slot.valueKey]
		for vals[slot.valueKey] == old {
			vals = mergeOld(vals, slot.values(g, lang), slot.valueKey)
		}
		vals["old"] = old
		unit = []*pturn{h.add(h.after(last), typ, lang, fill(g.say(s, slot.update, lang), vals), slot.name+"#updated")}
		kinds = append(kinds, "updated")
	}
	if len(slot.distract) > 0 {
		dv := distractValues(g, slot, vals, lang)
		for range 1 + g.r.IntN(2) {
			h.add(h.after(si), Episodic, lang, fill(g.say(s, slot.distract, lang), dv), "")
		}
	}
	qlang := h.questionLang(lang)
	var para, rare []string
	for _, tpl := range slot.ask[qlang] {
		if strings.HasPrefix(tpl, "!") {
			rare = append(rare, tpl)
		} else {
			para = append(para, tpl)
		}
	}
	if len(para) > 0 {
		q := h.ask(qlang, pick(g, para), vals, "", lang, unit)
		q.Kinds = append(q.Kinds, kinds...)
	}
	for _, tpl := range rare {
		h.lookalike(slot.lookalike, qlang)
		q := h.ask(qlang, tpl, vals, "", lang, unit)
		q.Kinds = append(q.Kinds, kinds...)
	}
}

// events reports one or two events a session, some with a question, a follow-up or
// a distractor, then asks for the meals had with one friend more than once.
func (h *history) events() {
	g, s := h.g, h.s
	usedUnique := map[string]bool{}
	clashes := map[string]int{}
	meals := map[string][]*pturn{} // friend -> meals
	mealLang := map[string]string{}
	draw := func(lang string) (eventKind, map[string]string) {
		for range 8 {
			k := pick(g, weightedKinds)
			if clashes[k.name] >= 20 {
				continue // its unique values are used up: it would only burn dates
			}
			v := k.values(g, s, lang)
			if u := k.name + ":" + v[k.unique]; !usedUnique[u] {
				usedUnique[u] = true
				return k, v
			}
			clashes[k.name]++
		}
		return eventKind{}, nil
	}
	for sess := range h.n {
		for range 1 + g.r.IntN(2) {
			lang := g.langOf(s)
			kind, vals := draw(lang)
			if vals == nil {
				continue
			}
			t := h.event(sess, lang, kind, vals)
			if kind.name == "meal" {
				f := vals["friend"]
				meals[f] = append(meals[f], t)
				mealLang[f] = lang
			}
		}
	}
	friends := make([]string, 0, len(meals))
	for f := range meals {
		friends = append(friends, f)
	}
	sort.Strings(friends)
	for _, f := range friends {
		if len(meals[f]) < 2 {
			continue
		}
		var units [][]*pturn
		for _, m := range meals[f] {
			units = append(units, []*pturn{m})
		}
		lang := mealLang[f]
		q := h.ask(lang, pick(g, multiAsk[lang]), map[string]string{"friend": f}, "", lang, units...)
		q.Kinds = append(q.Kinds, "multi")
	}
}

func (h *history) event(sess int, lang string, kind eventKind, vals map[string]string) *pturn {
	g, s := h.g, h.s
	t := h.add(sess, Episodic, lang, fill(g.say(s, kind.say, lang), vals), "")
	key := kind.name + ":" + vals[kind.askKey]
	h.keyCount[key]++
	if g.r.IntN(100) < 60 {
		qlang := h.questionLang(lang)
		tpl := pick(g, kind.ask[qlang])
		if strings.HasPrefix(tpl, "!") {
			h.lookalike(kind.lookalike, qlang)
		}
		h.ask(qlang, tpl, vals, key, lang, []*pturn{t})
	}
	if len(kind.followUp) > 0 && g.r.IntN(100) < 30 {
		h.add(min(h.n-1, sess+1+g.r.IntN(3)), Episodic, lang, fill(g.say(s, kind.followUp, lang), vals), "")
	}
	if g.r.IntN(2) == 0 {
		h.add(h.after(sess), Episodic, lang, fill(g.say(s, kind.distract, lang), vals), "")
	}
	return t
}

// chat adds one to three lines a session, each distinct within the scope (an agent
// that writes "ok thanks" twice writes the same memory twice: an exact duplicate,
// which is not what the corpus measures).
func (h *history) chat() {
	g := h.g
	said := map[string]bool{}
	for sess := range h.n {
		for range 1 + g.r.IntN(3) {
			lang := g.langOf(h.s)
			line := pick(g, chat[lang])
			for tries := 0; said[line]; tries++ {
				switch {
				case tries > 50:
					line = pick(g, chat[lang]) + " " + pick(g, chat[lang]) + " " + pick(g, chat[lang])
				case tries > 5:
					line = pick(g, chat[lang]) + " " + pick(g, chat[lang])
				default:
					line = pick(g, chat[lang])
				}
			}
			said[line] = true
			h.add(sess, Episodic, lang, line, "")
		}
	}
}

// finish orders each session's turns, dates them a few minutes apart, numbers them,
// and resolves the questions' evidence (dropping those with two answers).
func (h *history) finish() ([]Turn, []Question) {
	var turns []*pturn
	for sess, ts := range h.sessions {
		h.g.r.Shuffle(len(ts), func(a, b int) { ts[a], ts[b] = ts[b], ts[a] })
		at := h.starts[sess]
		for _, t := range ts {
			at = at.Add(time.Duration(30+h.g.r.IntN(200)) * time.Second)
			t.At, t.Session = at, sess
			turns = append(turns, t)
		}
	}
	seen := map[string]bool{}
	out := make([]Turn, 0, len(turns))
	for i, t := range turns {
		t.ID = fmt.Sprintf("%s-%04d", h.s.id, i+1)
		if seen[t.Text] { // a distractor drawn twice: keep one
			continue
		}
		seen[t.Text] = true
		out = append(out, t.Turn)
	}
	var questions []Question
	for _, q := range h.qs {
		if q.key != "" && h.keyCount[q.key] > 1 {
			continue
		}
		q.Scope = h.s.scope
		old := true
		for _, unit := range q.evidence {
			var ids []string
			for _, t := range unit {
				ids = append(ids, t.ID)
				old = old && End.Sub(t.At) >= OldAge
			}
			q.Evidence = append(q.Evidence, ids)
		}
		if old {
			q.Kinds = append(q.Kinds, "old")
		}
		q.ID = fmt.Sprintf("q-%s-%03d", h.s.id, len(questions)+1)
		questions = append(questions, q.Question)
	}
	return out, questions
}

// mergeOld is vals with key (and what goes with it) taken from fresh: an update
// changes the slot's value and keeps the rest (the city of a district).
func mergeOld(vals, fresh map[string]string, key string) map[string]string {
	out := map[string]string{}
	for k, v := range vals {
		out[k] = v
	}
	if key == "district" && fresh["city"] == vals["city"] {
		out[key] = fresh[key]
		return out
	}
	if key != "district" {
		out[key] = fresh[key]
	}
	return out
}

// distractValues fills a slot's distractors: {other} is another district than the
// speaker's, {other_pet} another animal.
func distractValues(g *gen, slot factSlot, vals map[string]string, lang string) map[string]string {
	dv := map[string]string{}
	for k, v := range vals {
		dv[k] = v
	}
	if ds := vals["districts"]; ds != "" {
		var others []string
		for _, d := range strings.Split(ds, ",") {
			if d != vals["district"] && d != vals["old"] {
				others = append(others, d)
			}
		}
		dv["other"] = pick(g, others)
	}
	if slot.name == "pet" {
		dv["other_pet"] = pick(g, petKinds[lang])
		for dv["other_pet"] == vals["pet_kind"] {
			dv["other_pet"] = pick(g, petKinds[lang])
		}
	}
	return dv
}
