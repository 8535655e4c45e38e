package iggytest

import (
	"fmt"
	"sync"
	"testing"

	iggcon "github.com/apache/iggy/foreign/go/contracts"
)

// Benchmarks of the broker through the official SDK on loopback, in
// batches of 1,000 messages of 100 bytes. Run with
//
//	go test -run '^$' -bench . -benchtime 3s ./connectors/iggy/iggytest/
//
// The figures include the SDK's own encoding and decoding, which run in the
// same process and share the machine with the broker.

const benchBatch, benchSize = 1000, 100

func benchMessages(b *testing.B) []iggcon.IggyMessage {
	out := make([]iggcon.IggyMessage, benchBatch)
	payload := make([]byte, benchSize)
	for i := range out {
		m, err := iggcon.NewIggyMessage(payload)
		must(b, err)
		out[i] = m
	}
	return out
}

func benchTarget(b *testing.B, durable bool, partitions uint32) (target, iggcon.Identifier, iggcon.Identifier) {
	opts := []Option{WithMaxMessagesPerPartition(2_000_000)}
	if durable {
		opts = append(opts, WithDataDir(b.TempDir()))
	}
	tg := embeddedTarget(b, opts...)
	cli := tg.login(b)
	_, err := cli.CreateStream("bench")
	must(b, err)
	_, err = cli.CreateTopic(mustID("bench"), "t", partitions, iggcon.CompressionAlgorithmNone, 0, 0, nil)
	must(b, err)
	return tg, mustID("bench"), mustID("t")
}

func BenchmarkSend(b *testing.B) {
	for _, mode := range []struct {
		name      string
		durable   bool
		producers int
	}{{"memory/1-producer", false, 1}, {"memory/2-producers", false, 2}, {"datadir/1-producer", true, 1}, {"datadir/2-producers", true, 2}} {
		b.Run(mode.name, func(b *testing.B) {
			tg, sid, tid := benchTarget(b, mode.durable, uint32(mode.producers))
			clients := make([]iggcon.Client, mode.producers)
			batches := make([][]iggcon.IggyMessage, mode.producers)
			for i := range clients {
				clients[i] = tg.login(b)
				batches[i] = benchMessages(b)
			}
			b.SetBytes(benchBatch * benchSize)
			b.ResetTimer()
			var wg sync.WaitGroup
			per := (b.N + mode.producers - 1) / mode.producers
			for i := range clients {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for n := 0; n < per; n++ {
						if err := clients[i].SendMessages(sid, tid, iggcon.PartitionId(uint32(i)), batches[i]); err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			b.ReportMetric(float64(per*mode.producers*benchBatch)/b.Elapsed().Seconds(), "msgs/s")
		})
	}
}

func BenchmarkPoll(b *testing.B) {
	const stored = 200 // batches kept in the partition
	for _, mode := range []struct {
		name      string
		durable   bool
		consumers int
	}{{"memory/1-consumer", false, 1}, {"memory/2-consumers", false, 2}, {"datadir/1-consumer", true, 1}, {"datadir/2-consumers", true, 2}} {
		b.Run(mode.name, func(b *testing.B) {
			tg, sid, tid := benchTarget(b, mode.durable, uint32(mode.consumers))
			prod := tg.login(b)
			batch := benchMessages(b)
			for p := 0; p < mode.consumers; p++ {
				for i := 0; i < stored; i++ {
					must(b, prod.SendMessages(sid, tid, iggcon.PartitionId(uint32(p)), batch))
				}
			}
			clients := make([]iggcon.Client, mode.consumers)
			for i := range clients {
				clients[i] = tg.login(b)
			}
			b.SetBytes(benchBatch * benchSize)
			b.ResetTimer()
			var wg sync.WaitGroup
			per := (b.N + mode.consumers - 1) / mode.consumers
			for i := range clients {
				wg.Add(1)
				go func() {
					defer wg.Done()
					pid := uint32(i)
					for n := 0; n < per; n++ {
						off := uint64(n%stored) * benchBatch
						pm, err := clients[i].PollMessages(sid, tid, iggcon.DefaultConsumer(), iggcon.OffsetPollingStrategy(off), benchBatch, false, &pid)
						if err != nil || len(pm.Messages) != benchBatch {
							b.Error(fmt.Errorf("poll at %d: %d messages, %v", off, len(pm.Messages), err))
							return
						}
					}
				}()
			}
			wg.Wait()
			b.ReportMetric(float64(per*mode.consumers*benchBatch)/b.Elapsed().Seconds(), "msgs/s")
		})
	}
}
