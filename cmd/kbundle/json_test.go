package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/kbundle/kbundle/cmd/internal/loadcmd"
	"github.com/kbundle/kbundle/internal/testutil"
	"github.com/kbundle/kbundle/internal/testutil/tree"
	"github.com/kbundle/kbundle/launcher"
)

// jsonCase is one run of TestJSONSchema: kbundle ARGS, which must exit
// code, in the environment env adds.
type jsonCase struct {
	name string
	args []string
	code int
	env  map[string]string
}

// TestJSONSchema runs every command that has --json, succeeding and
// failing, on a small packed bundle, and holds what each prints to the
// one schema, docs/json-schema.json:
//
//   - the schema lists exactly the commands that have --json (a command
//     added with --json fails here until it is described), and this
//     table runs each at least once succeeding and once failing;
//   - stdout is one JSON value that validates against the command's
//     $defs entry on success, and against $defs/failure on a failure
//     (status and clean: their own object, with ok false), every field
//     printed being declared (fields are only ever added, and each
//     addition is described);
//   - a failure's kind and exit_status agree with the exit status, its
//     reason and hint are the lines stderr shows, and stderr and the
//     status are the same without --json;
//   - every command's object requires schema_version and ok, and every
//     record of a bundle, set, layer or tree a digest.
func TestJSONSchema(t *testing.T) {
	schema := readSchema(t)
	defs := schema["$defs"].(map[string]any)

	var withJSON []string
	for _, c := range newApp(nil, nil).Commands {
		if findFlag(c.Flags, "json") != nil {
			withJSON = append(withJSON, c.Name)
		}
	}
	var listed []string
	for _, n := range schema["x-kbundle-commands"].([]any) {
		listed = append(listed, n.(string))
	}
	slices.Sort(withJSON)
	slices.Sort(listed)
	if !slices.Equal(withJSON, listed) {
		t.Fatalf("commands with --json %q, but docs/json-schema.json's x-kbundle-commands lists %q", withJSON, listed)
	}
	for _, n := range listed {
		d, ok := defs[n].(map[string]any)
		if !ok {
			t.Fatalf("docs/json-schema.json: no $defs/%s", n)
		}
		if d["type"] == "object" && (!slices.Contains(required(d), "schema_version") || !slices.Contains(required(d), "ok")) {
			t.Errorf("$defs/%s does not require schema_version and ok", n)
		}
	}
	for name, d := range defs {
		d := d.(map[string]any)
		if _, ok := d["x-kbundle-record"]; !ok {
			continue
		}
		req := required(d)
		if then, ok := d["then"].(map[string]any); ok {
			req = append(req, required(then)...)
		}
		if !slices.Contains(req, "file_digest") && !slices.Contains(req, "content_digest") {
			t.Errorf("$defs/%s describes a %s but requires neither file_digest nor content_digest", name, d["x-kbundle-record"])
		}
	}

	work := t.TempDir()
	t.Chdir(work)
	quietEnv(t)
	if err := tree.WriteSpec("cache", cacheSpec()); err != nil {
		t.Fatal(err)
	}
	kb := func(args ...string) (int, string, string) {
		var so, se bytes.Buffer
		code := run(append([]string{"kbundle"}, args...), &so, &se)
		return code, so.String(), se.String()
	}
	if code, _, se := kb("pack", "--dir", "cache", "-o", "b.kbundle", "-q"); code != 0 {
		t.Fatalf("pack: exit %d: %s", code, se)
	}
	b, err := os.ReadFile("b.kbundle")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"set.kbundle", "bad.kbundle"} {
		if err := os.WriteFile(f, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := tree.FlipByte("bad.kbundle", int64(len(b)/2)); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir("notmine", 0o700); err != nil {
		t.Fatal(err)
	}
	newFile := func() { // what the job compiled, for harvest
		if err := os.WriteFile(filepath.Join("dest", "numba", "g.nbi"), []byte("index g"), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	cases := []jsonCase{
		{"pack", []string{"pack", "--dir", "cache", "-o", "p.kbundle"}, 0, nil},
		{"pack", []string{"pack"}, exitUsage, nil},
		{"info", []string{"info", "b.kbundle"}, 0, nil},
		{"info", []string{"info", "missing.kbundle"}, exitUnusable, nil},
		{"ls", []string{"ls", "b.kbundle"}, 0, nil},
		{"ls", []string{"ls", "b.kbundle", "numba/"}, 0, nil},
		{"ls", []string{"ls", "b.kbundle", "nothing/*"}, exitError, nil},
		{"verify", []string{"verify", "b.kbundle", "--deep"}, 0, nil},
		{"verify", []string{"verify", "bad.kbundle"}, exitUnusable, nil},
		{"extract", []string{"extract", "set.kbundle", "dest"}, 0, nil},
		{"extract", []string{"extract", "set.kbundle", "dest"}, exitError, nil},
		{"load", []string{"load", "--bundle", "b.kbundle", "--to", "loaded"}, 0, nil},
		{"load", []string{"load", "--bundle", "missing.kbundle", "--to", "loaded2"}, exitUnusable, nil},
		{"load", []string{"load", "--bundle", "b.kbundle", "--to", "loaded3", "--jobs", "5000"}, exitUsage, nil},
		{"harvest", []string{"harvest", "--bundle", "set.kbundle", "--to", "dest"}, 0, nil}, // a layer: newFile
		{"harvest", []string{"harvest", "--bundle", "set.kbundle", "--to", "dest"}, 0, nil}, // nothing new
		{"harvest", []string{"harvest"}, exitUsage, nil},
		{"info", []string{"info", "set.kbundle"}, 0, nil}, // with its layer
		{"status", []string{"status", "dest", "nothing-here"}, 0, nil},
		{"status", []string{"status", "b.kbundle"}, exitError, nil},
		{"status", []string{"status", "--bogus"}, exitUsage, nil},
		{"diff", []string{"diff", "b.kbundle", "dest"}, 0, nil},
		{"diff", []string{"diff", "b.kbundle", "missing.kbundle"}, exitUnusable, nil},
		{"merge", []string{"merge", "set.kbundle"}, 0, nil},
		{"merge", []string{"merge", "set.kbundle"}, 0, nil}, // nothing to fold
		{"merge", []string{"merge"}, exitUsage, nil},
		{"clean", []string{"clean", "loaded", "nothing-here"}, 0, nil},
		{"clean", []string{"clean", "notmine"}, exitError, nil},
		{"detect", []string{"detect"}, 0, nil},
		{"detect", []string{"detect"}, exitUsage, map[string]string{"KBUNDLE_MODE": "fast"}},
		{"version", []string{"version"}, 0, nil},
		{"version", []string{"version", "extra"}, exitUsage, nil},
		{"presets", []string{"presets"}, 0, nil},
		{"presets", []string{"presets", "extra"}, exitUsage, nil},
	}
	ran := map[string][2]bool{}
	for i, tc := range cases {
		t.Run(fmt.Sprintf("%02d-%s-%d", i, tc.name, tc.code), func(t *testing.T) {
			if tc.name == "harvest" && tc.code == 0 && !ran["harvest"][0] {
				newFile()
			}
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			args := append(slices.Clone(tc.args), "--json")
			code, so, se := kb(args...)
			if code != tc.code {
				t.Fatalf("kbundle %s: exit %d, want %d\nstdout:\n%sstderr:\n%s", strings.Join(args, " "), code, tc.code, so, se)
			}
			r := ran[tc.name]
			r[min(code, 1)] = true
			ran[tc.name] = r
			dec := json.NewDecoder(strings.NewReader(so))
			dec.UseNumber()
			var v any
			if err := dec.Decode(&v); err != nil || dec.More() {
				t.Fatalf("stdout is not one JSON value (%v):\n%s", err, so)
			}
			obj, _ := v.(map[string]any)
			def := tc.name
			if code != 0 && (obj == nil || obj["trees"] == nil && obj["refused"] == nil) {
				def = "failure"
			}
			for _, e := range validate(defs, defs[def], v, "") {
				t.Errorf("$defs/%s: %s", def, e)
			}
			if t.Failed() {
				t.Logf("stdout:\n%s", so)
			}
			if code == 0 {
				if obj != nil && obj["ok"] != true {
					t.Errorf("exit 0 with ok %v", obj["ok"])
				}
				return
			}
			checkFailure(t, obj, code, se)
			// Without --json: the same status and the same stderr.
			code2, so2, se2 := kb(tc.args...)
			if code2 != code || se2 != se {
				t.Errorf("without --json: exit %d, stderr\n%s\nwith it: exit %d, stderr\n%s", code2, se2, code, se)
			}
			if strings.Contains(so2, `"schema_version"`) {
				t.Errorf("without --json, stdout has JSON:\n%s", so2)
			}
		})
	}
	for _, n := range listed {
		if r := ran[n]; !r[0] || !r[1] {
			t.Errorf("%s: the table runs it succeeding %v and failing %v: want both", n, r[0], r[1])
		}
	}
}

// checkFailure checks the failure fields of obj, an object printed by a
// command that exited code with stderr.
func checkFailure(t *testing.T, obj map[string]any, code int, stderr string) {
	t.Helper()
	if obj["ok"] != false {
		t.Errorf("exit %d with ok %v", code, obj["ok"])
	}
	if n, _ := obj["exit_status"].(json.Number); n.String() != strconv.Itoa(code) {
		t.Errorf("exit_status %v, exit %d", obj["exit_status"], code)
	}
	want := map[int][]loadcmd.Kind{exitError: {loadcmd.Failed, loadcmd.Comm}, exitUsage: {loadcmd.Usage}, exitUnusable: {loadcmd.Unusable}}[code]
	if k, _ := obj["kind"].(string); !slices.Contains(want, loadcmd.Kind(k)) || loadcmd.Kind(k).Exit() != code {
		t.Errorf("kind %q for exit %d", k, code)
	}
	reason, _ := obj["reason"].(string)
	hint, _ := obj["hint"].(string)
	lines := strings.Split(reason, "\n")
	if hint != "" {
		lines = append(lines, strings.Split(hint, "\n")...)
	}
	for _, l := range lines {
		if !strings.Contains(stderr, "kbundle: "+l+"\n") {
			t.Errorf("reason or hint line %q is not on stderr:\n%s", l, stderr)
		}
	}
}

// quietEnv clears, for the test, the launchers' and kbundle's variables
// (the tests may run inside an allocation) and turns progress off.
func quietEnv(t *testing.T) {
	keep := map[string]bool{}
	for _, kv := range testutil.CleanEnv() {
		k, _, _ := strings.Cut(kv, "=")
		keep[k] = true
	}
	drop := append(launcher.Names(), loadcmd.JobIDVars...)
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); !keep[k] {
			drop = append(drop, k)
		}
	}
	for _, k := range drop {
		t.Setenv(k, "") // restored after the test
		os.Unsetenv(k)
	}
	t.Setenv("KBUNDLE_NO_PROGRESS", "1")
}

func readSchema(t *testing.T) map[string]any {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(testutil.RepoRoot(), "docs", "json-schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	var s map[string]any
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatalf("docs/json-schema.json: %v", err)
	}
	return s
}

func required(schema map[string]any) []string {
	var out []string
	for _, r := range asList(schema["required"]) {
		out = append(out, r.(string))
	}
	return out
}

func asList(v any) []any { l, _ := v.([]any); return l }

// validate checks v against schema, the subset of JSON Schema (2020-12)
// docs/json-schema.json uses: $ref (to #/$defs/NAME), type, const, enum,
// pattern, minLength, minimum, maximum, required, properties,
// additionalProperties, items, minItems, maxItems, anyOf, if/then. It is
// stricter than the standard in one way: an object's fields must all be
// declared (in properties, or by additionalProperties), so that every
// field kbundle prints is described. It returns the problems, each with
// its path in v.
func validate(defs map[string]any, schema any, v any, at string) []string {
	s, ok := schema.(map[string]any)
	if !ok {
		return []string{at + ": no schema"}
	}
	var errs []string
	bad := func(format string, a ...any) { errs = append(errs, at+": "+fmt.Sprintf(format, a...)) }
	if ref, ok := s["$ref"].(string); ok {
		name, ok := strings.CutPrefix(ref, "#/$defs/")
		if !ok || defs[name] == nil {
			return []string{at + ": unknown $ref " + ref}
		}
		errs = append(errs, validate(defs, defs[name], v, at)...)
	}
	if typ, ok := s["type"].(string); ok && !hasType(v, typ) {
		bad("%s, want %s", describe(v), typ)
		return errs
	}
	if c, ok := s["const"]; ok && !sameJSON(c, v) {
		bad("%s, want %v", describe(v), c)
	}
	if e, ok := s["enum"]; ok && !slices.ContainsFunc(asList(e), func(x any) bool { return sameJSON(x, v) }) {
		bad("%s, want one of %v", describe(v), e)
	}
	switch x := v.(type) {
	case string:
		if p, ok := s["pattern"].(string); ok && !regexp.MustCompile(p).MatchString(x) {
			bad("%q does not match %s", x, p)
		}
		if n, ok := s["minLength"].(float64); ok && len(x) < int(n) {
			bad("%q shorter than %v", x, n)
		}
	case json.Number:
		f, _ := x.Float64()
		if m, ok := s["minimum"].(float64); ok && f < m {
			bad("%v below %v", x, m)
		}
		if m, ok := s["maximum"].(float64); ok && f > m {
			bad("%v above %v", x, m)
		}
	case []any:
		if n, ok := s["minItems"].(float64); ok && len(x) < int(n) {
			bad("%d items, want at least %v", len(x), n)
		}
		if n, ok := s["maxItems"].(float64); ok && len(x) > int(n) {
			bad("%d items, want at most %v", len(x), n)
		}
		if items, ok := s["items"]; ok {
			for i, e := range x {
				errs = append(errs, validate(defs, items, e, fmt.Sprintf("%s/%d", at, i))...)
			}
		}
	case map[string]any:
		for _, r := range required(s) {
			if _, ok := x[r]; !ok {
				bad("no field %s", r)
			}
		}
		props, _ := s["properties"].(map[string]any)
		extra, hasExtra := s["additionalProperties"]
		for _, k := range slices.Sorted(maps.Keys(x)) {
			switch p, declared := props[k]; {
			case declared:
				errs = append(errs, validate(defs, p, x[k], at+"/"+k)...)
			case hasExtra:
				errs = append(errs, validate(defs, extra, x[k], at+"/"+k)...)
			case props != nil && s["type"] == "object":
				bad("field %s is not in the schema (describe it there, and in docs/json.md)", k)
			}
		}
	}
	if alts := asList(s["anyOf"]); len(alts) > 0 && !slices.ContainsFunc(alts, func(a any) bool { return len(validate(defs, a, v, at)) == 0 }) {
		bad("%s matches none of anyOf", describe(v))
	}
	if cond, ok := s["if"]; ok && len(validate(defs, cond, v, at)) == 0 {
		if then, ok := s["then"]; ok {
			errs = append(errs, validate(defs, then, v, at)...)
		}
	}
	return errs
}

func hasType(v any, typ string) bool {
	switch x := v.(type) {
	case nil:
		return typ == "null"
	case bool:
		return typ == "boolean"
	case string:
		return typ == "string"
	case json.Number:
		_, err := strconv.ParseInt(x.String(), 10, 64)
		return typ == "number" || typ == "integer" && err == nil
	case []any:
		return typ == "array"
	case map[string]any:
		return typ == "object"
	}
	return false
}

// sameJSON compares a schema's value (float64 numbers) with a printed one
// (json.Number).
func sameJSON(schema, v any) bool {
	if n, ok := v.(json.Number); ok {
		f, _ := n.Float64()
		return schema == f
	}
	return schema == v
}

func describe(v any) string {
	b, _ := json.Marshal(v)
	if len(b) > 60 {
		b = append(b[:57], "..."...)
	}
	return string(b)
}

// TestJSONSchemaDocumented: docs/json.md's table of JSON fields names,
// in its row for each command, every field that docs/json-schema.json
// declares for it, and the error object's fields are described.
func TestJSONSchemaDocumented(t *testing.T) {
	schema := readSchema(t)
	defs := schema["$defs"].(map[string]any)
	b, err := os.ReadFile(filepath.Join(testutil.RepoRoot(), "docs", "json.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, sec, ok := strings.Cut(string(b), "# JSON output\n")
	if !ok {
		t.Fatal("docs/json.md: no JSON output title")
	}
	sec, _, _ = strings.Cut(sec, "\n## ")
	rows := map[string]string{}
	for l := range strings.Lines(sec) {
		if rest, ok := strings.CutPrefix(l, "| `"); ok {
			name, row, _ := strings.Cut(rest, "` |")
			rows[name] = row
		}
	}
	for _, n := range asList(schema["x-kbundle-commands"]) {
		d := defs[n.(string)].(map[string]any)
		if d["type"] == "array" {
			d = d["items"].(map[string]any)
		}
		row, ok := rows[n.(string)]
		if !ok {
			t.Errorf("docs/json.md: no row for %s", n)
			continue
		}
		for _, f := range slices.Sorted(maps.Keys(d["properties"].(map[string]any))) {
			if !strings.Contains(row, "`"+f+"`") {
				t.Errorf("docs/json.md: %s's row does not name `%s`", n, f)
			}
		}
	}
	for f := range defs["failure"].(map[string]any)["properties"].(map[string]any) {
		if !strings.Contains(sec, "`"+f+"`") {
			t.Errorf("docs/json.md: the error object's `%s` is not described", f)
		}
	}
}

// TestJSONSpeakerOnly: a collective command's error object comes from
// rank 0 alone, as its success does; the other ranks' stdout stays empty
// (here: a build without MPI refused under a launcher of 2 tasks).
func TestJSONSpeakerOnly(t *testing.T) {
	t.Chdir(t.TempDir())
	quietEnv(t)
	t.Setenv("OMPI_COMM_WORLD_SIZE", "2")
	t.Setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "2")
	for _, cmd := range [][]string{{"load", "--bundle", "b.kbundle", "--to", "d"}, {"harvest", "--bundle", "b.kbundle", "--to", "d"}} {
		for _, rank := range []string{"0", "1"} {
			t.Setenv("OMPI_COMM_WORLD_RANK", rank)
			t.Setenv("OMPI_COMM_WORLD_LOCAL_RANK", rank)
			var so, se bytes.Buffer
			code := run(append([]string{"kbundle"}, append(cmd, "--json")...), &so, &se)
			if code != exitUsage {
				t.Fatalf("%s on rank %s: exit %d, want 2\n%s", cmd[0], rank, code, se.String())
			}
			var obj map[string]any
			switch err := json.Unmarshal(so.Bytes(), &obj); {
			case rank != "0" && so.Len() > 0:
				t.Errorf("%s on rank %s: stdout %q, want nothing", cmd[0], rank, so.String())
			case rank == "0" && (err != nil || obj["kind"] != "usage" || strings.Count(so.String(), "\n") != 1):
				t.Errorf("%s on rank 0: stdout %q, want one error object of kind usage", cmd[0], so.String())
			}
		}
	}
}
