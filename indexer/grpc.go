package indexer

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"

	"github.com/kvroute/kvroute/internal/openai"
	"github.com/kvroute/kvroute/kvblock"
	kvroutev1 "github.com/kvroute/kvroute/proto/kvroute/v1"
	"github.com/kvroute/kvroute/tokenizer"
)

// MaxLookupKeys bounds the keys of one gRPC lookup (a 2M-token prompt at 16 per block).
const MaxLookupKeys = 1 << 17

// watchBuffer is how many events a Watch stream may lag before it is ended.
const watchBuffer = 1024

// GRPCServer implements the kvroutev1.Index gRPC service over a Service.
type GRPCServer struct {
	kvroutev1.UnimplementedIndexServer
	svc    *Service
	tok    tokenizer.Tokenizer
	log    *slog.Logger
	health *health.Server
}

var _ kvroutev1.IndexServer = (*GRPCServer)(nil)

// NewGRPCServer returns the Index API over svc. tok tokenizes OpenAI bodies in lookups;
// nil is allowed, and then only token-id prompts, token and key lookups work.
func NewGRPCServer(svc *Service, tok tokenizer.Tokenizer, log *slog.Logger) *GRPCServer {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &GRPCServer{svc: svc, tok: tok, log: log, health: health.NewServer()}
}

// Register adds the Index service, the standard health service (serving) and server
// reflection to s.
func (g *GRPCServer) Register(s *grpc.Server) {
	kvroutev1.RegisterIndexServer(s, g)
	healthpb.RegisterHealthServer(s, g.health)
	g.health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	g.health.SetServingStatus(kvroutev1.Index_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	reflection.Register(s)
}

// GRPCConfig says where and how to serve the Index API.
type GRPCConfig struct {
	// ListenAddr is HOST:PORT; port 0 picks a free one (read it back with Addr).
	ListenAddr string
	// TLSCertFile and TLSKeyFile (PEM) turn TLS on; both or neither.
	TLSCertFile, TLSKeyFile string
}

// GRPCEndpoint is a running gRPC server.
type GRPCEndpoint struct {
	srv  *grpc.Server
	lis  net.Listener
	done chan struct{}
	g    *GRPCServer
}

// Serve binds cfg.ListenAddr and serves the Index API (with health and reflection) in the
// background until Close.
func (g *GRPCServer) Serve(cfg GRPCConfig) (*GRPCEndpoint, error) {
	var opts []grpc.ServerOption
	if cfg.TLSCertFile != "" || cfg.TLSKeyFile != "" {
		if cfg.TLSCertFile == "" || cfg.TLSKeyFile == "" {
			return nil, fmt.Errorf("%w: TLS needs both a certificate and a key file", ErrConfig)
		}
		cert, err := tls.LoadX509KeyPair(cfg.TLSCertFile, cfg.TLSKeyFile)
		if err != nil {
			return nil, fmt.Errorf("%w: TLS key pair: %w", ErrConfig, err)
		}
		opts = append(opts, grpc.Creds(credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})))
	}
	lis, err := net.Listen("tcp", cfg.ListenAddr)
	if err != nil {
		return nil, fmt.Errorf("indexer: grpc listen %s: %w", cfg.ListenAddr, err)
	}
	s := grpc.NewServer(opts...)
	g.Register(s)
	ep := &GRPCEndpoint{srv: s, lis: lis, done: make(chan struct{}), g: g}
	go func() {
		defer close(ep.done)
		if err := s.Serve(lis); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			g.log.Error("grpc server stopped", "err", err)
		}
	}()
	return ep, nil
}

// Addr returns the bound address (HOST:PORT).
func (e *GRPCEndpoint) Addr() string { return e.lis.Addr().String() }

// Close stops the server: health turns NOT_SERVING, then in-flight calls get a second to end.
func (e *GRPCEndpoint) Close() error {
	e.g.health.Shutdown()
	stopped := make(chan struct{})
	go func() { e.srv.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(time.Second):
		e.srv.Stop()
	}
	<-e.done
	return nil
}

// Lookup implements kvroutev1.IndexServer.
func (g *GRPCServer) Lookup(ctx context.Context, req *kvroutev1.LookupRequest) (*kvroutev1.LookupResponse, error) {
	var (
		keys      []uint64
		blockSize int
		prompt    int
	)
	switch q := req.GetQuery().(type) {
	case *kvroutev1.LookupRequest_Keys:
		keys = q.Keys.GetKeys()
		blockSize = int(q.Keys.GetBlockSize())
		if blockSize == 0 {
			blockSize = g.svc.cfg.BlockSize
		}
	case *kvroutev1.LookupRequest_Tokens:
		t := q.Tokens
		if t.GetModel() == "" {
			return nil, status.Error(codes.InvalidArgument, "tokens query: model is required")
		}
		blockSize = int(t.GetBlockSize())
		if blockSize == 0 {
			blockSize = g.svc.BlockSize(t.GetModel())
		}
		prompt = len(t.GetTokenIds())
		keys = kvblock.Keys(nil, kvblock.Seed(t.GetModel(), t.GetAdapter(), t.GetCacheSalt()), t.GetTokenIds(), blockSize)
	case *kvroutev1.LookupRequest_OpenaiBody:
		var err error
		keys, blockSize, prompt, err = g.bodyKeys(ctx, q.OpenaiBody)
		if err != nil {
			return nil, err
		}
	default:
		return nil, status.Error(codes.InvalidArgument, "lookup: one of keys, tokens or openai_body is required")
	}
	if len(keys) > MaxLookupKeys {
		return nil, status.Errorf(codes.InvalidArgument, "lookup: %d keys, at most %d", len(keys), MaxLookupKeys)
	}
	matches := g.svc.Lookup(keys, nil)
	resp := &kvroutev1.LookupResponse{
		TotalBlocks:  uint32(len(keys)),
		BlockSize:    uint32(blockSize),
		PromptTokens: uint32(prompt),
		Keys:         keys,
	}
	for _, m := range matches {
		resp.Matches = append(resp.Matches, &kvroutev1.Match{Instance: m.Instance, MatchedBlocks: uint32(m.Blocks),
			MatchedTokens: uint32(m.Blocks * blockSize)})
	}
	return resp, nil
}

// bodyKeys parses an OpenAI chat or completion body, tokenizes it and computes its keys
// with the seed and block size of the instances that serve its model.
func (g *GRPCServer) bodyKeys(ctx context.Context, body []byte) (keys []uint64, blockSize, prompt int, err error) {
	var probe struct {
		Messages json.RawMessage `json:"messages"`
	}
	if err := json.Unmarshal(body, &probe); err != nil {
		return nil, 0, 0, status.Errorf(codes.InvalidArgument, "openai_body: not a JSON object: %v", err)
	}
	var req *openai.Request
	if len(probe.Messages) > 0 {
		req, err = openai.ParseChat(body)
	} else {
		req, err = openai.ParseCompletion(body)
	}
	if err != nil {
		return nil, 0, 0, status.Errorf(codes.InvalidArgument, "openai_body: %v", err)
	}
	if req.Model == "" {
		return nil, 0, 0, status.Error(codes.InvalidArgument, "openai_body: model is required")
	}
	if g.tok == nil && !(req.Kind == openai.KindCompletion && req.HasPromptIDs) {
		return nil, 0, 0, status.Errorf(codes.FailedPrecondition, "%v: cannot tokenize a text prompt", ErrNoTokenizer)
	}
	res, err := req.Tokenize(ctx, g.tok)
	if err != nil {
		return nil, 0, 0, status.Errorf(codes.InvalidArgument, "openai_body: tokenize: %v", err)
	}
	base, adapter := req.Model, ""
	blockSize = g.svc.cfg.BlockSize
	for _, in := range g.svc.Instances() {
		d := in.Descriptor
		if d == nil || in.State == StateGone {
			continue
		}
		if d.Model == req.Model || slices.Contains(d.Adapters, req.Model) {
			if d.Model != req.Model {
				base, adapter = d.Model, req.Model
			}
			if d.BlockSize > 0 {
				blockSize = int(d.BlockSize)
			}
			break
		}
	}
	keys = kvblock.Keys(nil, kvblock.Seed(base, adapter, req.CacheSalt), res.IDs, blockSize)
	return keys, blockSize, len(res.IDs), nil
}

// ListInstances implements kvroutev1.IndexServer.
func (g *GRPCServer) ListInstances(context.Context, *kvroutev1.ListInstancesRequest) (*kvroutev1.ListInstancesResponse, error) {
	resp := &kvroutev1.ListInstancesResponse{}
	for _, in := range g.svc.Instances() {
		resp.Instances = append(resp.Instances, in.Proto())
	}
	return resp, nil
}

// GetInstance implements kvroutev1.IndexServer.
func (g *GRPCServer) GetInstance(_ context.Context, req *kvroutev1.GetInstanceRequest) (*kvroutev1.InstanceInfo, error) {
	in, ok := g.svc.Instance(req.GetId())
	if !ok {
		return nil, status.Errorf(codes.NotFound, "%v: %q", ErrUnknownInstance, req.GetId())
	}
	return in.Proto(), nil
}

// Stats implements kvroutev1.IndexServer.
func (g *GRPCServer) Stats(context.Context, *kvroutev1.StatsRequest) (*kvroutev1.StatsResponse, error) {
	st := g.svc.Stats()
	return &kvroutev1.StatsResponse{
		Keys:          uint64(st.Keys),
		Entries:       uint64(st.Entries),
		Instances:     uint32(st.Instances),
		EventsApplied: st.EventsApplied,
		Evictions:     st.Evictions,
		Gaps:          st.Gaps,
		Snapshots:     st.Snapshots,
		MaxKeys:       uint64(st.MaxKeys),
		Lookups:       st.Lookups,
	}, nil
}

// Watch implements kvroutev1.IndexServer: instance changes until the client goes away. A
// client that falls watchBuffer events behind is ended with ResourceExhausted.
func (g *GRPCServer) Watch(req *kvroutev1.WatchRequest, stream kvroutev1.Index_WatchServer) error {
	ch := make(chan InstanceEvent, watchBuffer)
	overflow := make(chan struct{})
	var over bool
	cancel := g.svc.Subscribe(func(ev InstanceEvent) {
		if over {
			return
		}
		select {
		case ch <- ev:
		default:
			over = true
			close(overflow)
		}
	})
	defer cancel()
	if req.GetInitial() {
		now := time.Now().UnixNano()
		for _, in := range g.svc.Instances() {
			if err := stream.Send(&kvroutev1.WatchEvent{Type: kvroutev1.WatchEventType_WATCH_EVENT_TYPE_ADDED,
				Instance: in.Proto(), AtUnixNano: now}); err != nil {
				return err
			}
		}
	}
	for {
		select {
		case <-stream.Context().Done():
			return nil
		case ev := <-ch:
			if err := stream.Send(&kvroutev1.WatchEvent{Type: ev.Type.Proto(), Instance: ev.Instance.Proto(),
				AtUnixNano: ev.At.UnixNano()}); err != nil {
				return err
			}
		case <-overflow:
			return status.Errorf(codes.ResourceExhausted, "watch: client fell %d events behind", watchBuffer)
		}
	}
}
