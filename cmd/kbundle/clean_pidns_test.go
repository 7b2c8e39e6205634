package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kbundle/kbundle/bundle"
)

// TestPIDNamespaceNote: a process in a PID namespace of its own is told
// by its namespace's inode, or by the NSpid line of /proc/self/status.
func TestPIDNamespaceNote(t *testing.T) {
	const host = "pid:[4026531836]"
	for _, c := range []struct {
		status, ns string
		nested     bool
	}{
		{"Name:\tkbundle\nNSpid:\t4242\n", host, false},
		{"Name:\tkbundle\nNSpid:\t4242\t1\n", host, true}, // the host's /proc
		{"Name:\tkbundle\nNSpid:\t4242\t17\t1\n", host, true},
		{"Name:\tkbundle\nNSpid:\t3\n", "pid:[4026532178]", true}, // its own /proc (--mount-proc)
		{"Name:\tkbundle\n", host, false},                         // a kernel before 4.1
		{"Name:\tkbundle\n", "", false},                           // no /proc/self/ns
	} {
		if got := pidNamespaceNote([]byte(c.status), c.ns) != ""; got != c.nested {
			t.Errorf("%q, %s: nested %v, want %v", c.status, c.ns, got, c.nested)
		}
	}
}

// TestCleanAllMineOtherPIDNamespace is X9 of the 2026-12-01b review:
// clean --all-mine (and --older-than) keeps a tree whose job it sees
// running in /proc; run in a PID namespace of its own (a container's;
// here unshare --pid), it saw no job and removed the DEST a running job
// was using. There it must keep every tree and say why. Root only
// (unshare).
func TestCleanAllMineOtherPIDNamespace(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("unshare --pid needs root")
	}
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Skip("unshare (util-linux) not installed")
	}
	dir := t.TempDir()
	src := t.TempDir()
	os.WriteFile(filepath.Join(src, "k"), []byte("kernel"), 0o644)
	out := filepath.Join(dir, "b.kbundle")
	if _, err := bundle.Pack(context.Background(), src, out, nil); err != nil {
		t.Fatal(err)
	}
	rc, err := bundle.Open(out, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	tmp := filepath.Join(dir, "tmp")
	os.Mkdir(tmp, 0o700)
	tree := filepath.Join(tmp, "kbundle-root-42")
	if _, err := rc.Extract(context.Background(), tree, &bundle.ExtractOptions{Record: bundle.RecordInfo{Job: "42"}}); err != nil {
		t.Fatal(err)
	}
	job := exec.Command("sleep", "60") // job 42, still running on this node
	job.Env = append(os.Environ(), "SLURM_JOB_ID=42")
	if err := job.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { job.Process.Kill(); job.Wait() }()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	kb := filepath.Join(t.TempDir(), "kbundle") // the test binary acts as kbundle under that name
	if b, err := exec.Command("cp", self, kb).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v: %s", err, b)
	}
	clean := func(args ...string) (string, error) {
		cmd := exec.Command(args[0], args[1:]...)
		cmd.Env = append(os.Environ(), "TMPDIR="+tmp, "USER=root", "SLURM_JOB_ID=")
		b, err := cmd.CombinedOutput()
		return string(b), err
	}
	if b, err := clean(kb, "clean", "--all-mine"); err != nil || !strings.Contains(b, "job 42 still runs") {
		t.Fatalf("same namespace: %v\n%s", err, b)
	}
	b, err := clean("unshare", "--pid", "--fork", "--mount-proc", kb, "clean", "--all-mine")
	if strings.Contains(b, "cannot") && strings.Contains(b, "unshare") {
		t.Skipf("unshare --pid fails here: %s", b)
	}
	if _, serr := os.Stat(filepath.Join(tree, "k")); serr != nil {
		t.Fatalf("another PID namespace's clean --all-mine removed the tree of running job 42: %v\n%s", err, b)
	}
	if err != nil || !strings.Contains(b, "PID namespace of its own") {
		t.Errorf("want exit 0 and the reason named: %v\n%s", err, b)
	}
	b, err = clean("unshare", "--pid", "--fork", "--mount-proc", kb, "clean", "--older-than", "0")
	if _, serr := os.Stat(filepath.Join(tree, "k")); serr != nil || !strings.Contains(b, "PID namespace of its own") {
		t.Fatalf("--older-than from another PID namespace: %v, %v\n%s", serr, err, b)
	}
}
