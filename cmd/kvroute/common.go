package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/pflag"

	"github.com/kvroute/kvroute/internal/natsutil"
)

// serverFlags are the flags every long-running server shares.
type serverFlags struct {
	Listen        string
	GRPCListen    string
	MetricsListen string
	LogLevel      string
	LogFormat     string
	nats          natsFlags
}

// natsFlags say how to reach NATS.
type natsFlags struct {
	URL       string
	Creds     string
	User      string
	Password  string
	Token     string
	TLSCA     string
	TLSCert   string
	TLSKey    string
	EmbedHost string
	EmbedPort int
}

type serverDefaults struct {
	Listen, GRPCListen, MetricsListen string
	// NoGRPC leaves --grpc-listen out, for servers that serve no gRPC.
	NoGRPC bool
}

func (s *serverFlags) register(fs *pflag.FlagSet, d serverDefaults) {
	fs.StringVar(&s.Listen, "listen", d.Listen, "main HTTP address, HOST:PORT")
	if !d.NoGRPC {
		fs.StringVar(&s.GRPCListen, "grpc-listen", d.GRPCListen, "gRPC address, HOST:PORT (empty = off)")
	}
	fs.StringVar(&s.MetricsListen, "metrics-listen", d.MetricsListen, "Prometheus /metrics address, HOST:PORT (empty = served on --listen)")
	fs.StringVar(&s.LogLevel, "log-level", "info", "log level: debug, info, warn, error")
	fs.StringVar(&s.LogFormat, "log-format", "text", "log format: text or json")
	s.nats.register(fs)
}

func (n *natsFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&n.URL, "nats", natsutil.Embedded, "NATS URL(s), comma-separated; 'embedded' starts an in-process NATS server")
	fs.StringVar(&n.Creds, "nats-creds", "", "NATS credentials file (.creds)")
	fs.StringVar(&n.User, "nats-user", "", "NATS user name")
	fs.StringVar(&n.Password, "nats-password", "", "NATS password")
	fs.StringVar(&n.Token, "nats-token", "", "NATS auth token")
	fs.StringVar(&n.TLSCA, "nats-tls-ca", "", "CA certificate file (PEM) to verify the NATS server")
	fs.StringVar(&n.TLSCert, "nats-tls-cert", "", "client certificate file (PEM) for NATS")
	fs.StringVar(&n.TLSKey, "nats-tls-key", "", "client key file (PEM) for NATS")
	fs.StringVar(&n.EmbedHost, "nats-embedded-host", "127.0.0.1", "host the embedded NATS server listens on (with --nats embedded)")
	fs.IntVar(&n.EmbedPort, "nats-embedded-port", 4222, "port of the embedded NATS server (with --nats embedded; -1 = any free port)")
}

// connect returns a NATS connection, starting the embedded server first when asked to.
// The returned close function closes the connection and stops the server.
func (n *natsFlags) connect(name string, log *slog.Logger) (*nats.Conn, func(), error) {
	url := n.URL
	var srv *server.Server
	if url == natsutil.Embedded {
		s, err := natsutil.StartServer(natsutil.ServerConfig{Host: n.EmbedHost, Port: n.EmbedPort})
		if err != nil {
			return nil, nil, err
		}
		srv = s
		url = s.ClientURL()
		log.Info("embedded NATS server started", "url", url)
	}
	nc, err := natsutil.Connect(natsutil.ClientConfig{
		URL: url, Name: name, CredsFile: n.Creds, User: n.User, Password: n.Password, Token: n.Token,
		TLSCAFile: n.TLSCA, TLSCertFile: n.TLSCert, TLSKeyFile: n.TLSKey, Log: log,
	})
	if err != nil {
		if srv != nil {
			srv.Shutdown()
		}
		return nil, nil, err
	}
	return nc, func() {
		nc.Close()
		if srv != nil {
			srv.Shutdown()
		}
	}, nil
}

// newLogger builds the process logger from --log-level and --log-format.
func newLogger(level, format string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, usageError{fmt.Errorf("--log-level %q: want debug, info, warn or error", level)}
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch strings.ToLower(format) {
	case "text", "":
		return slog.New(slog.NewTextHandler(os.Stderr, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(os.Stderr, opts)), nil
	default:
		return nil, usageError{fmt.Errorf("--log-format %q: want text or json", format)}
	}
}

// signalContext is cancelled on SIGINT or SIGTERM, or when parent (the command's
// context, so tests can stop a command) ends.
func signalContext(parent context.Context) (context.Context, context.CancelFunc) {
	return notifyContext(parent)
}

// serveHTTP serves h on addr in the background; the returned stop shuts it down
// (2 s grace). what names the server in the logs.
func serveHTTP(addr string, h http.Handler, log *slog.Logger, what string) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("%s: listen %s: %w", what, addr, err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error(what+" server", "err", err)
		}
	}()
	log.Info(what+" listening", "addr", ln.Addr().String())
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}, nil
}

// metricsHandler serves the registry at /metrics and a liveness probe at /healthz.
func metricsHandler(reg *prometheus.Registry) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	return mux
}
