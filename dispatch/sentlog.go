package dispatch

import (
	"bytes"
	"iter"
	"sync"
)

// sentLog keeps a stream's data lines as they were read, for a
// migration's or a hand-off's generated text (generatedText). The lines
// go into blocks of sentBlock bytes drawn from a pool and given back when
// the turn ends: a long answer's hundreds of kilobytes of chunks cost
// neither a slice grown and copied as it doubles nor the collector's
// attention, turn after turn.
type sentLog struct {
	blocks []*[]byte
}

// sentBlock is the size of a sentLog's blocks: a few dozen chunks.
const sentBlock = 16 << 10

var sentBlocks = sync.Pool{New: func() any {
	b := make([]byte, 0, sentBlock)
	return &b
}}

// add keeps line, whole in one block (a line longer than a block has a
// block of its own).
func (s *sentLog) add(line []byte) {
	n := len(s.blocks)
	if n == 0 || cap(*s.blocks[n-1])-len(*s.blocks[n-1]) < len(line)+1 {
		var b *[]byte
		if len(line)+1 <= sentBlock {
			b = sentBlocks.Get().(*[]byte)
		} else {
			own := make([]byte, 0, len(line)+1)
			b = &own
		}
		s.blocks = append(s.blocks, b)
		n++
	}
	b := s.blocks[n-1]
	*b = append(*b, line...)
	*b = append(*b, '\n')
}

// lines yields the kept lines in order, without their newlines.
func (s *sentLog) lines() iter.Seq[[]byte] {
	return func(yield func([]byte) bool) {
		for _, b := range s.blocks {
			for line := range bytes.SplitSeq(*b, []byte("\n")) {
				if len(line) > 0 && !yield(line) {
					return
				}
			}
		}
	}
}

// release gives the blocks back to the pool; the log is empty after it.
func (s *sentLog) release() {
	for i, b := range s.blocks {
		if cap(*b) == sentBlock {
			*b = (*b)[:0]
			sentBlocks.Put(b)
		}
		s.blocks[i] = nil
	}
	s.blocks = s.blocks[:0]
}
