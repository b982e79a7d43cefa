package deploy

import (
	"bufio"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

const dockerfile = "docker/Dockerfile"

// dockerInstr is one Dockerfile instruction with continuation lines joined.
type dockerInstr struct {
	op, args string
	line     int
}

func parseDockerfile(t *testing.T, path string) []dockerInstr {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []dockerInstr
	var cur strings.Builder
	start := 0
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if cur.Len() == 0 && (line == "" || strings.HasPrefix(line, "#")) {
			continue
		}
		if cur.Len() == 0 {
			start = n
		}
		if body, cont := strings.CutSuffix(line, "\\"); cont {
			cur.WriteString(body + " ")
			continue
		}
		cur.WriteString(line)
		op, args, _ := strings.Cut(cur.String(), " ")
		out = append(out, dockerInstr{op: strings.ToUpper(op), args: strings.TrimSpace(args), line: start})
		cur.Reset()
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestDockerfile: a multi-stage build of ./cmd/kvroute with go.mod's Go version, static (no
// cgo), onto distroless/static as non-root, with the version stamped into main.version.
func TestDockerfile(t *testing.T) {
	instrs := parseDockerfile(t, dockerfile)
	known := map[string]bool{"FROM": true, "WORKDIR": true, "ENV": true, "COPY": true, "RUN": true, "ARG": true, "USER": true, "EXPOSE": true, "ENTRYPOINT": true, "CMD": true, "LABEL": true}
	var froms []dockerInstr
	var all string
	for _, in := range instrs {
		if !known[in.op] {
			t.Errorf("%s:%d: unknown or unexpected instruction %s", dockerfile, in.line, in.op)
		}
		if in.op == "FROM" {
			froms = append(froms, in)
		}
		all += in.op + " " + in.args + "\n"
	}
	if len(froms) != 2 {
		t.Fatalf("%s: %d stages, want a build stage and a runtime stage", dockerfile, len(froms))
	}
	goVersion, err := goModVersion("go")
	if err != nil {
		t.Fatal(err)
	}
	if want := "golang:" + majorMinor(goVersion) + " AS build"; froms[0].args != want {
		t.Errorf("%s: build stage %q, want %q (go.mod says go %s)", dockerfile, froms[0].args, want, goVersion)
	}
	if !strings.HasPrefix(froms[1].args, "gcr.io/distroless/static") || !strings.Contains(froms[1].args, ":nonroot") {
		t.Errorf("%s: runtime stage %q, want gcr.io/distroless/static...:nonroot", dockerfile, froms[1].args)
	}
	if !strings.Contains(all, "CGO_ENABLED=0") {
		t.Errorf("%s: the binary must be static: CGO_ENABLED=0 (distroless/static has no libc)", dockerfile)
	}
	build := regexp.MustCompile(`go build .*-o (\S+) (\./\S+)`).FindStringSubmatch(all)
	if build == nil {
		t.Fatalf("%s: no `go build -o OUT ./PKG`", dockerfile)
	}
	if main, err := os.ReadFile(filepath.Join("..", build[2], "main.go")); err != nil || !strings.Contains(string(main), "package main") {
		t.Errorf("%s: builds %s, which has no main package: %v", dockerfile, build[2], err)
	}
	if !strings.Contains(all, "-X main.version=${VERSION}") {
		t.Errorf("%s: stamp the version with -ldflags -X main.version=${VERSION}", dockerfile)
	}
	if v, err := os.ReadFile("../cmd/kvroute/version.go"); err != nil || !strings.Contains(string(v), "var version = ") {
		t.Errorf("cmd/kvroute/version.go no longer has `var version`, which the Dockerfile stamps: %v", err)
	}
	copyRE := regexp.MustCompile(`--from=build ` + regexp.QuoteMeta(build[1]) + ` (\S+)`)
	dst := copyRE.FindStringSubmatch(all)
	if dst == nil {
		t.Fatalf("%s: the runtime stage does not COPY --from=build %s", dockerfile, build[1])
	}
	if !strings.Contains(all, `ENTRYPOINT ["`+dst[1]+`"]`) {
		t.Errorf("%s: ENTRYPOINT must be [%q], the copied binary (manifests give the subcommand in args)", dockerfile, dst[1])
	}
	if !regexp.MustCompile(`(?m)^USER (65532|nonroot)`).MatchString(all) {
		t.Errorf("%s: run as the distroless nonroot user (65532), which the manifests' runAsUser expects", dockerfile)
	}
	if _, err := os.Stat(dockerfile + ".dockerignore"); err != nil {
		t.Errorf("%s.dockerignore: %v", dockerfile, err)
	}
}
