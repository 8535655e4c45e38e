package iggytest_test

import (
	"fmt"
	"io"
	"log"

	"github.com/apache/iggy/foreign/go/client"
	"github.com/apache/iggy/foreign/go/client/tcp"
	iggcon "github.com/apache/iggy/foreign/go/contracts"
	"github.com/strand-io/strand/connectors/iggy/iggytest"
)

// A test starts a broker, points the official SDK at it, and closes it.
func Example() {
	log.SetOutput(io.Discard) // the SDK logs its leader check through the std logger
	srv, err := iggytest.NewServer()
	if err != nil {
		panic(err)
	}
	defer srv.Close()

	cli, err := client.NewIggyClient(client.WithTcp(tcp.WithServerAddress(srv.Addr())))
	if err != nil {
		panic(err)
	}
	defer cli.Close()
	if _, err := cli.LoginUser("iggy", "iggy"); err != nil {
		panic(err)
	}
	stream, _ := iggcon.NewIdentifier("bank")
	topic, _ := iggcon.NewIdentifier("accounts")
	if _, err := cli.CreateStream("bank"); err != nil {
		panic(err)
	}
	if _, err := cli.CreateTopic(stream, "accounts", 4, iggcon.CompressionAlgorithmNone, 0, 0, nil); err != nil {
		panic(err)
	}
	key, _ := iggcon.EntityIdString("acct-42")
	msg, _ := iggcon.NewIggyMessage([]byte("deposited 100"))
	if err := cli.SendMessages(stream, topic, key, []iggcon.IggyMessage{msg}); err != nil {
		panic(err)
	}
	partition := uint32(3) // XXH32("acct-42") % 4
	polled, err := cli.PollMessages(stream, topic, iggcon.DefaultConsumer(), iggcon.FirstPollingStrategy(), 10, true, &partition)
	if err != nil {
		panic(err)
	}
	for _, m := range polled.Messages {
		fmt.Printf("partition %d offset %d: %s\n", polled.PartitionId, m.Header.Offset, m.Payload)
	}
	// Output:
	// partition 3 offset 0: deposited 100
}

// Fault injection: the next two sends fail as if the partition were gone.
func ExampleServer_FailNext() {
	srv, err := iggytest.NewServer()
	if err != nil {
		panic(err)
	}
	defer srv.Close()
	srv.FailNext(iggytest.CmdSendMessages, 2, iggytest.StatusPartitionNotFound)
	fmt.Println(iggytest.CmdSendMessages)
	// Output:
	// send_messages
}
