package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.yaml.in/yaml/v3"
)

// usageError marks errors caused by bad flags or configuration (exit code 2).
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

var errConfig = errors.New("config")

// envPrefix prefixes every environment variable that sets a flag.
const envPrefix = "KVROUTE_"

// envName is the environment variable for a flag name: KVROUTE_ + upper case, '-' → '_'.
func envName(flag string) string {
	return envPrefix + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// applyConfig fills every flag of cmd that was not set on the command line, first from
// the environment, then from the --config YAML file. Unknown keys in the file are an
// error that names them, so a typo never passes silently.
func applyConfig(cmd *cobra.Command) error {
	fs := cmd.Flags()
	fileValues := map[string]string{}
	if path, _ := fs.GetString("config"); path != "" || os.Getenv(envName("config")) != "" {
		if path == "" {
			path = os.Getenv(envName("config"))
		}
		vals, err := readConfigFile(path, fs)
		if err != nil {
			return usageError{err}
		}
		fileValues = vals
	}
	var errs []error
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Changed || f.Name == "config" || f.Name == "help" {
			return
		}
		src, val, ok := "", "", false
		if v, set := os.LookupEnv(envName(f.Name)); set {
			src, val, ok = envName(f.Name), v, true
		} else if v, set := fileValues[f.Name]; set {
			src, val, ok = "config file key "+f.Name, v, true
		}
		if !ok {
			return
		}
		if sv, isSlice := f.Value.(pflag.SliceValue); isSlice {
			// Replace, not append, so that a file list is the whole list.
			if err := sv.Replace(splitList(val)); err != nil {
				errs = append(errs, fmt.Errorf("%w: %s: %v", errConfig, src, err))
			}
			f.Changed = true
			return
		}
		if err := f.Value.Set(val); err != nil {
			errs = append(errs, fmt.Errorf("%w: %s=%q: %v", errConfig, src, val, err))
			return
		}
		f.Changed = true
	})
	if len(errs) > 0 {
		return usageError{errors.Join(errs...)}
	}
	if unknown := unknownEnv(cmd.Root(), os.Environ()); len(unknown) > 0 {
		fmt.Fprintf(cmd.ErrOrStderr(), "kvroute: warning: environment variables that set no flag of any subcommand: %s\n", strings.Join(unknown, ", "))
	}
	return nil
}

// unknownEnv lists the KVROUTE_* variables in env that match no flag of any command in
// the tree: a typo there would otherwise pass silently. (A variable meant for another
// subcommand is fine: one environment often serves several.)
func unknownEnv(root *cobra.Command, env []string) []string {
	known := map[string]bool{}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		for _, fs := range []*pflag.FlagSet{c.Flags(), c.PersistentFlags()} {
			fs.VisitAll(func(f *pflag.Flag) { known[envName(f.Name)] = true })
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
	var out []string
	for _, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, envPrefix) && !known[name] {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

// readConfigFile reads a YAML mapping of flag names to values. Keys may use '-' or '_'.
// Lists become comma-separated values.
func readConfigFile(path string, fs *pflag.FlagSet) (map[string]string, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errConfig, err)
	}
	var doc map[string]any
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	if err := dec.Decode(&doc); err != nil && err.Error() != "EOF" {
		return nil, fmt.Errorf("%w: %s: %v", errConfig, path, err)
	}
	out := map[string]string{}
	var unknown []string
	for k, v := range doc {
		name := strings.ReplaceAll(k, "_", "-")
		if fs.Lookup(name) == nil || name == "config" {
			unknown = append(unknown, k)
			continue
		}
		s, err := scalarString(v)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: key %s: %v", errConfig, path, k, err)
		}
		out[name] = s
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return nil, fmt.Errorf("%w: %s: unknown keys: %s", errConfig, path, strings.Join(unknown, ", "))
	}
	return out, nil
}

func scalarString(v any) (string, error) {
	switch x := v.(type) {
	case nil:
		return "", nil
	case string:
		return x, nil
	case bool, int, int64, uint64, float64:
		return fmt.Sprint(x), nil
	case []any:
		parts := make([]string, 0, len(x))
		for _, e := range x {
			s, err := scalarString(e)
			if err != nil {
				return "", err
			}
			parts = append(parts, s)
		}
		return strings.Join(parts, ","), nil
	default:
		return "", fmt.Errorf("want a scalar or a list, got %T", v)
	}
}

func splitList(s string) []string {
	if strings.TrimSpace(s) == "" {
		return []string{}
	}
	parts := strings.Split(s, ",")
	for i := range parts {
		parts[i] = strings.TrimSpace(parts[i])
	}
	return parts
}
