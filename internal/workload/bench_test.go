package workload

import "testing"

func BenchmarkReadMooncakeSmall(b *testing.B) {
	b.SetBytes(int64(len(smallTrace)))
	for b.Loop() {
		if _, err := ReadMooncake(SmallTrace(), MooncakeOptions{}); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkAgenticQuick(b *testing.B) {
	for b.Loop() {
		if _, err := Agentic(Quick()); err != nil {
			b.Fatal(err)
		}
	}
}
