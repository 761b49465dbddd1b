package consumer

import (
	"fmt"
	"testing"
)

// TestIsolationAlone: a turn is alone only if no other was running when it
// started and none started before it ended; turns that overlapped share
// their crash's name, and the next life gets another.
func TestIsolationAlone(t *testing.T) {
	s := NewIsolation()
	if _, alone, _ := s.run(false, ready, func() {}); !alone {
		t.Error("a turn with the process to itself is not alone")
	}

	var b turn
	var bAlone bool
	a, aAlone, _ := s.run(false, ready, func() {
		b, bAlone, _ = s.run(false, ready, func() {}) // started while a ran
	})
	if bAlone {
		t.Error("a turn that started while another ran is alone")
	}
	if aAlone {
		t.Error("a turn during which another started is alone")
	}
	if s.crash(a) != s.crash(b) {
		t.Error("turns at the same crash are named apart")
	}
	c, _, _ := s.run(false, ready, func() {})
	if s.crash(c) == s.crash(a) {
		t.Error("a crash of the next life has the name of the last one")
	}
}

// TestIsolationExclusive: a marked message waits for the unmarked ones at
// the process, and the unmarked ones wait for it; a turn given up takes
// nothing.
func TestIsolationExclusive(t *testing.T) {
	s := NewIsolation()
	s.run(false, ready, func() {
		if s.gate.TryLock() {
			t.Fatal("an exclusive turn could begin while a shared one ran")
		}
	})
	_, alone, _ := s.run(true, ready, func() {
		if s.gate.TryRLock() {
			t.Fatal("a shared turn could begin while an exclusive one ran")
		}
	})
	if !alone {
		t.Error("the exclusive turn was not alone")
	}
	called := false
	if _, _, ok := s.run(true, func() bool { return false }, func() { called = true }); ok || called {
		t.Error("a turn given up while waiting for the process was taken")
	}
	if !s.gate.TryLock() {
		t.Error("a turn given up holds the gate")
	}
}

// TestIsolationMarks: a culprit always runs alone, a suspect until its
// crash's culprit is known, an unmarked message never.
func TestIsolationMarks(t *testing.T) {
	s := NewIsolation()
	if s.alone("") || !s.alone(markCrashed) || !s.alone("c-1") {
		t.Fatal("unmarked shares, a culprit and a suspect run alone")
	}
	s.resolve("c-1")
	if s.alone("c-1") || !s.alone("c-2") {
		t.Error("a suspect of a resolved crash runs alone, or one of another does not")
	}
	for i := range maxResolved {
		s.resolve(fmt.Sprint("x-", i))
	}
	if !s.alone("c-1") {
		t.Error("the resolved crashes are not bounded: the oldest is still known")
	}
}

func ready() bool { return true }
