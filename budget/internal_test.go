package budget

import "testing"

// The deposit that crosses a multiple of 2^40 units trims the balance to
// the cap, so that a budget that sees no withdrawal for years keeps its
// balance far from overflow; the trimmed excess is not a withdrawal.
func TestDepositTrimsAtTheGuard(t *testing.T) {
	b, err := New(Config{Ratio: 1, MaxTokens: 10, MinPerSecond: -1})
	if err != nil {
		t.Fatal(err)
	}
	b.deposited.Store(1<<40 - 1500) // as if 1.1e9 deposits had come and no withdrawal
	b.Deposit()
	if bal := int64(b.deposited.Load() - b.withdrawn.Load()); bal != 1<<40-500 {
		t.Fatalf("balance %d units before the guard, want no trim yet", bal)
	}
	b.Deposit() // crosses 2^40
	if bal := int64(b.deposited.Load() - b.withdrawn.Load()); bal != b.capUnits {
		t.Fatalf("balance %d units after the guard, want the cap %d", bal, b.capUnits)
	}
	if s := b.Snapshot(); s.Withdrawals != 0 || s.Balance != 10 {
		t.Errorf("Snapshot %+v, want no withdrawals and a balance of 10", s)
	}
	n := 0
	for b.Withdraw() {
		n++
	}
	if s := b.Snapshot(); n != 10 || s.Withdrawals != 10 {
		t.Errorf("granted %d, Snapshot %+v; want 10", n, s)
	}
}

// The counters wrap around 2^64 harmlessly: only their difference is used.
func TestCountersWrapAround(t *testing.T) {
	b, err := New(Config{Ratio: 0.5, MaxTokens: 10, MinPerSecond: -1})
	if err != nil {
		t.Fatal(err)
	}
	const start = ^uint64(0) - 4500 // five deposits short of wrapping
	b.deposited.Store(start)
	b.withdrawn.Store(start)
	b.discarded = start // so that Withdrawals counts from here
	for range 30 {      // 15 tokens, wrapping on the way
		b.Deposit()
	}
	if d := b.deposited.Load(); d > start {
		t.Fatalf("deposited %d did not wrap", d)
	}
	if s := b.Snapshot(); s.Balance != 10 || s.Withdrawals != 0 {
		t.Fatalf("Snapshot %+v, want a balance of 10 (the cap)", s)
	}
	n := 0
	for b.Withdraw() {
		n++
	}
	if s := b.Snapshot(); n != 10 || s.Withdrawals != 10 || s.Balance != 0 {
		t.Errorf("granted %d, Snapshot %+v; want 10 and an empty balance", n, s)
	}
}
