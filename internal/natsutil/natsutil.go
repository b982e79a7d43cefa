// Package natsutil starts kvroute's embedded NATS server and opens client connections
// with the options every component shares (reconnect forever, credentials, TLS).
// It holds no kvroute protocol logic.
package natsutil

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// Embedded is the URL value that asks a component to start an in-process NATS server.
const Embedded = "embedded"

// ErrNotReady is returned when the embedded server does not accept connections in time.
var ErrNotReady = errors.New("natsutil: embedded NATS server not ready")

// ServerConfig configures an embedded NATS server.
type ServerConfig struct {
	// Host and Port to listen on; Port -1 picks a free port (tests), 0 means 4222.
	Host string
	Port int
	// MaxPayloadBytes caps one message; 0 keeps NATS' default (1 MiB).
	MaxPayloadBytes int32
}

// StartServer starts an in-process NATS server and waits until it accepts connections.
func StartServer(cfg ServerConfig) (*server.Server, error) {
	opts := &server.Options{
		Host:       cfg.Host,
		Port:       cfg.Port,
		NoLog:      true,
		NoSigs:     true,
		MaxPayload: cfg.MaxPayloadBytes,
	}
	if opts.Host == "" {
		opts.Host = "127.0.0.1"
	}
	s, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("natsutil: embedded server: %w", err)
	}
	go s.Start()
	if !s.ReadyForConnections(5 * time.Second) {
		s.Shutdown()
		return nil, ErrNotReady
	}
	return s, nil
}

// ClientConfig configures a client connection.
type ClientConfig struct {
	URL  string
	Name string
	// CredsFile is a NATS .creds file (JWT + nkey seed); empty for none.
	CredsFile string
	// User/Password or Token authentication; empty for none.
	User, Password, Token string
	// TLS: CA file to verify the server, and an optional client certificate.
	TLSCAFile, TLSCertFile, TLSKeyFile string
	Log                                *slog.Logger
}

// Connect opens a connection that reconnects forever and logs its state changes.
func Connect(cfg ClientConfig) (*nats.Conn, error) {
	log := cfg.Log
	if log == nil {
		log = slog.Default()
	}
	opts := []nats.Option{
		nats.Name(cfg.Name),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond),
		nats.RetryOnFailedConnect(true),
		nats.ReconnectBufSize(32 << 20),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				log.Warn("nats disconnected", "err", err)
			}
		}),
		nats.ReconnectHandler(func(c *nats.Conn) { log.Info("nats reconnected", "url", c.ConnectedUrl()) }),
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			subj := ""
			if sub != nil {
				subj = sub.Subject
			}
			log.Warn("nats async error", "subject", subj, "err", err)
		}),
	}
	if cfg.CredsFile != "" {
		opts = append(opts, nats.UserCredentials(cfg.CredsFile))
	}
	if cfg.User != "" {
		opts = append(opts, nats.UserInfo(cfg.User, cfg.Password))
	}
	if cfg.Token != "" {
		opts = append(opts, nats.Token(cfg.Token))
	}
	if cfg.TLSCAFile != "" || cfg.TLSCertFile != "" {
		tc, err := tlsConfig(cfg)
		if err != nil {
			return nil, err
		}
		opts = append(opts, nats.Secure(tc))
	}
	nc, err := nats.Connect(cfg.URL, opts...)
	if err != nil {
		return nil, fmt.Errorf("natsutil: connect %s: %w", cfg.URL, err)
	}
	return nc, nil
}

func tlsConfig(cfg ClientConfig) (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if cfg.TLSCAFile != "" {
		pem, err := os.ReadFile(cfg.TLSCAFile)
		if err != nil {
			return nil, fmt.Errorf("natsutil: tls ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("natsutil: tls ca %s: no certificates", cfg.TLSCAFile)
		}
		tc.RootCAs = pool
	}
	if cfg.TLSCertFile != "" {
		cert, err := tls.LoadX509KeyPair(cfg.TLSCertFile, cfg.TLSKeyFile)
		if err != nil {
			return nil, fmt.Errorf("natsutil: tls client cert: %w", err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}
