package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// testCmd is a throwaway command with the kinds of flags the real ones use.
func testCmd(t *testing.T, args ...string) (*cobra.Command, *struct {
	listen  string
	conc    int
	engines []string
	debug   bool
}, error) {
	t.Helper()
	v := &struct {
		listen  string
		conc    int
		engines []string
		debug   bool
	}{}
	root := &cobra.Command{Use: "x", SilenceErrors: true, SilenceUsage: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error { return applyConfig(cmd) }}
	root.PersistentFlags().String("config", "", "")
	sub := &cobra.Command{Use: "sub", RunE: func(*cobra.Command, []string) error { return nil }}
	sub.Flags().StringVar(&v.listen, "listen", ":8080", "")
	sub.Flags().IntVar(&v.conc, "concurrency", 10, "")
	sub.Flags().StringSliceVar(&v.engines, "engines", nil, "")
	sub.Flags().BoolVar(&v.debug, "debug-headers", false, "")
	root.AddCommand(sub)
	root.SetArgs(append([]string{"sub"}, args...))
	root.SetOut(&bytes.Buffer{})
	err := root.Execute()
	return sub, v, err
}

func writeFile(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "c.yml")
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestPrecedenceFlagEnvFileDefault(t *testing.T) {
	file := writeFile(t, "listen: ':1111'\nconcurrency: 3\nengines: [http://a, http://b]\ndebug_headers: true\n")

	_, v, err := testCmd(t)
	if err != nil || v.listen != ":8080" || v.conc != 10 {
		t.Fatalf("defaults: %+v %v", v, err)
	}
	_, v, err = testCmd(t, "--config", file)
	if err != nil || v.listen != ":1111" || v.conc != 3 || strings.Join(v.engines, " ") != "http://a http://b" || !v.debug {
		t.Fatalf("file: %+v %v", v, err)
	}
	t.Setenv("KVROUTE_LISTEN", ":2222")
	t.Setenv("KVROUTE_ENGINES", "http://c")
	_, v, err = testCmd(t, "--config", file)
	if err != nil || v.listen != ":2222" || v.conc != 3 || strings.Join(v.engines, " ") != "http://c" {
		t.Fatalf("env over file: %+v %v", v, err)
	}
	_, v, err = testCmd(t, "--config", file, "--listen", ":3333")
	if err != nil || v.listen != ":3333" {
		t.Fatalf("flag over env: %+v %v", v, err)
	}
	t.Setenv("KVROUTE_CONFIG", file)
	t.Setenv("KVROUTE_LISTEN", "")
	os.Unsetenv("KVROUTE_LISTEN")
	_, v, err = testCmd(t)
	if err != nil || v.conc != 3 {
		t.Fatalf("KVROUTE_CONFIG names the file: %+v %v", v, err)
	}
}

func TestBadConfigFiles(t *testing.T) {
	cases := map[string]string{
		"testdata/unknown-key.bad.yml": "unknown keys: lisen, port",
		"testdata/bad-type.bad.yml":    "key concurrency: want a scalar or a list",
	}
	for file, want := range cases {
		_, _, err := testCmd(t, "--config", file)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %v, want it to contain %q", file, err, want)
		}
	}
	_, _, err := testCmd(t, "--config", "testdata/missing.yml")
	if err == nil || !strings.Contains(err.Error(), "missing.yml") {
		t.Errorf("missing file: %v", err)
	}
	t.Setenv("KVROUTE_CONCURRENCY", "lots")
	_, _, err = testCmd(t)
	if err == nil || !strings.Contains(err.Error(), "KVROUTE_CONCURRENCY") {
		t.Errorf("bad env value must name the variable: %v", err)
	}
}

func TestRootListsSubcommands(t *testing.T) {
	var out bytes.Buffer
	root := newRootCmd()
	root.SetOut(&out)
	root.SetArgs([]string{"--help"})
	if err := root.Execute(); err != nil {
		t.Fatal(err)
	}
	for _, sub := range []string{"router", "agent", "indexer", "sim", "bench", "demo", "tokenize", "index", "version"} {
		if !strings.Contains(out.String(), "\n  "+sub+" ") {
			t.Errorf("--help does not list %s:\n%s", sub, out.String())
		}
	}
}

func TestEnvName(t *testing.T) {
	if got := envName("concurrency-threshold"); got != "KVROUTE_CONCURRENCY_THRESHOLD" {
		t.Fatal(got)
	}
}

func TestUnknownEnvIsNamed(t *testing.T) {
	root := newRootCmd()
	got := unknownEnv(root, []string{"KVROUTE_NATS=x", "KVROUTE_CONCURENCY_THRESHOLD=4", "KVROUTE_ENGINE_URL=u", "HOME=/root", "KVROUTE_LISTEN=:1"})
	if strings.Join(got, ",") != "KVROUTE_CONCURENCY_THRESHOLD" {
		t.Fatalf("unknown env %v: want only the typo (NATS, ENGINE_URL and LISTEN are flags of some subcommand)", got)
	}
}
