package natsutil

import (
	"testing"
	"time"
)

func TestEmbeddedServerRoundTrip(t *testing.T) {
	s, err := StartServer(ServerConfig{Port: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown()
	nc, err := Connect(ClientConfig{URL: s.ClientURL(), Name: "test"})
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	sub, err := nc.SubscribeSync("x.y")
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Publish("x.y", []byte("hi")); err != nil {
		t.Fatal(err)
	}
	m, err := sub.NextMsg(2 * time.Second)
	if err != nil || string(m.Data) != "hi" {
		t.Fatalf("got %v %v", m, err)
	}
}

func TestConnectBadTLSFileIsAnError(t *testing.T) {
	_, err := Connect(ClientConfig{URL: "nats://127.0.0.1:1", TLSCAFile: "/nonexistent/ca.pem"})
	if err == nil {
		t.Fatal("want an error for a missing CA file")
	}
}
