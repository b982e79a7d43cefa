package indexer

import (
	"context"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/kvroute/kvroute/kvblock"
	kvroutev1 "github.com/kvroute/kvroute/proto/kvroute/v1"
	"github.com/kvroute/kvroute/tokenizer"
)

func TestGRPCIndexAPI(t *testing.T) {
	url := startNATS(t)
	e := startService(t, url, testConfig())
	// Loading the embedded tokenizer takes ~20 s under -race: the chat-body part of the
	// test runs without -short only; token-id bodies need no tokenizer.
	var tok *tokenizer.Model
	if !testing.Short() {
		var err error
		tok, err = tokenizer.Default()
		must(t, err)
	}
	var itok tokenizer.Tokenizer
	if tok != nil {
		itok = tok
	}
	ep, err := NewGRPCServer(e.svc, itok, nil).Serve(GRPCConfig{ListenAddr: "127.0.0.1:0"})
	must(t, err)
	defer ep.Close()
	conn, err := grpc.NewClient(ep.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	must(t, err)
	defer conn.Close()
	c := kvroutev1.NewIndexClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	// Watch from the start, with the initial state.
	w, err := c.Watch(ctx, &kvroutev1.WatchRequest{Initial: true})
	must(t, err)

	// An agent caches a 3-block prompt given as token ids, and a chat prompt.
	ids := make([]uint32, 50)
	for i := range ids {
		ids[i] = uint32(1000 + i)
	}
	seed := kvblock.Seed("m", "", "")
	keys := kvblock.Keys(nil, seed, ids, 16)
	chat := `{"model":"m","messages":[{"role":"user","content":"Explain the KV cache of a transformer in one long paragraph, please, with detail."}]}`
	var res tokenizer.Result
	var chatKeys []uint64
	if tok != nil {
		res, err = tok.Chat(ctx, "m", &tokenizer.ChatRequest{Messages: []map[string]any{{"role": "user",
			"content": "Explain the KV cache of a transformer in one long paragraph, please, with detail."}}, AddGenerationPrompt: true})
		must(t, err)
		chatKeys = kvblock.Keys(nil, seed, res.IDs, 16)
		if len(chatKeys) == 0 {
			t.Fatalf("chat prompt of %d tokens has no full block", len(res.IDs))
		}
	}
	a := newFakeAgent(t, url, "eng-a")
	stop := a.heartbeatLoop(40 * time.Millisecond)
	defer stop()
	a.change(append(append([]uint64{}, keys[:2]...), chatKeys...), nil, false)
	eventually(t, 5*time.Second, "agent ready", func() bool { return sameKeys(e, a) && e.state("eng-a") == StateReady })

	// By keys.
	r, err := c.Lookup(ctx, &kvroutev1.LookupRequest{Query: &kvroutev1.LookupRequest_Keys{Keys: &kvroutev1.KeysQuery{Keys: keys}}})
	must(t, err)
	if len(r.Matches) != 1 || r.Matches[0].Instance != "eng-a" || r.Matches[0].MatchedBlocks != 2 || r.Matches[0].MatchedTokens != 32 {
		t.Fatalf("keys lookup = %v", r)
	}
	// By tokens.
	r, err = c.Lookup(ctx, &kvroutev1.LookupRequest{Query: &kvroutev1.LookupRequest_Tokens{Tokens: &kvroutev1.TokensQuery{Model: "m", TokenIds: ids}}})
	must(t, err)
	if r.TotalBlocks != 3 || r.BlockSize != 16 || r.PromptTokens != 50 || len(r.Matches) != 1 || r.Matches[0].MatchedBlocks != 2 {
		t.Fatalf("tokens lookup = %v", r)
	}
	// By OpenAI body: a token-id completion prompt and a chat request.
	body := fmt.Sprintf(`{"model":"m","prompt":%s}`, jsonInts(ids))
	r, err = c.Lookup(ctx, &kvroutev1.LookupRequest{Query: &kvroutev1.LookupRequest_OpenaiBody{OpenaiBody: []byte(body)}})
	must(t, err)
	if len(r.Matches) != 1 || r.Matches[0].MatchedBlocks != 2 {
		t.Fatalf("completion body lookup = %v", r)
	}
	r, err = c.Lookup(ctx, &kvroutev1.LookupRequest{Query: &kvroutev1.LookupRequest_OpenaiBody{OpenaiBody: []byte(chat)}})
	if tok == nil {
		if status.Code(err) != codes.FailedPrecondition {
			t.Fatalf("chat body without tokenizer: err = %v, want FailedPrecondition", err)
		}
	} else {
		must(t, err)
		if len(r.Matches) != 1 || int(r.Matches[0].MatchedBlocks) != len(chatKeys) || int(r.PromptTokens) != len(res.IDs) {
			t.Fatalf("chat body lookup = %v, want %d blocks of %d tokens", r, len(chatKeys), len(res.IDs))
		}
	}
	// Bad requests get InvalidArgument.
	for _, q := range []*kvroutev1.LookupRequest{
		{},
		{Query: &kvroutev1.LookupRequest_OpenaiBody{OpenaiBody: []byte("{not json")}},
		{Query: &kvroutev1.LookupRequest_OpenaiBody{OpenaiBody: []byte(`{"prompt":"no model"}`)}},
		{Query: &kvroutev1.LookupRequest_Tokens{Tokens: &kvroutev1.TokensQuery{TokenIds: ids}}},
	} {
		if _, err := c.Lookup(ctx, q); status.Code(err) != codes.InvalidArgument {
			t.Fatalf("Lookup(%v) err = %v, want InvalidArgument", q, err)
		}
	}

	li, err := c.ListInstances(ctx, &kvroutev1.ListInstancesRequest{})
	must(t, err)
	if len(li.Instances) != 1 || li.Instances[0].Blocks != uint64(2+len(chatKeys)) ||
		li.Instances[0].State != kvroutev1.InstanceState_INSTANCE_STATE_READY || li.Instances[0].GetDescriptor_().GetEngineUrl() != "http://eng-a" {
		t.Fatalf("ListInstances = %v", li)
	}
	if _, err := c.GetInstance(ctx, &kvroutev1.GetInstanceRequest{Id: "nope"}); status.Code(err) != codes.NotFound {
		t.Fatalf("GetInstance(nope) err = %v, want NotFound", err)
	}
	gi, err := c.GetInstance(ctx, &kvroutev1.GetInstanceRequest{Id: "eng-a"})
	must(t, err)
	if gi.Epoch != a.epoch {
		t.Fatalf("GetInstance = %v", gi)
	}
	st, err := c.Stats(ctx, &kvroutev1.StatsRequest{})
	must(t, err)
	if st.Keys != uint64(2+len(chatKeys)) || st.Instances != 1 || st.Lookups < 3 || st.MaxKeys != DefaultMaxKeys {
		t.Fatalf("Stats = %v", st)
	}
	ev, err := w.Recv()
	must(t, err)
	if ev.Type != kvroutev1.WatchEventType_WATCH_EVENT_TYPE_ADDED || ev.Instance.GetDescriptor_().GetId() != "eng-a" {
		t.Fatalf("first watch event = %v", ev)
	}
	hc := healthpb.NewHealthClient(conn)
	hr, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: kvroutev1.Index_ServiceDesc.ServiceName})
	must(t, err)
	if hr.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health = %v", hr.Status)
	}
}

func TestGRPCWithoutTokenizer(t *testing.T) {
	url := startNATS(t)
	e := startService(t, url, testConfig())
	g := NewGRPCServer(e.svc, nil, nil)
	_, err := g.Lookup(context.Background(), &kvroutev1.LookupRequest{Query: &kvroutev1.LookupRequest_OpenaiBody{
		OpenaiBody: []byte(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`)}})
	if status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("chat lookup without tokenizer: err = %v, want FailedPrecondition", err)
	}
	if _, err := g.Serve(GRPCConfig{ListenAddr: "127.0.0.1:0", TLSCertFile: "only-cert.pem"}); err == nil {
		t.Fatal("TLS with a certificate and no key was accepted")
	}
}

func jsonInts(ids []uint32) string {
	b := []byte{'['}
	for i, v := range ids {
		if i > 0 {
			b = append(b, ',')
		}
		b = fmt.Appendf(b, "%d", v)
	}
	return string(append(b, ']'))
}
