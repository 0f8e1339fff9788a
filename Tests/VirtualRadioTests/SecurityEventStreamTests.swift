// A stream of `SecurityEvent`s ends. `SecurityEvent` is a multi-payload enum whose
// largest payload (`PairingResult`) holds arrays; with `[Bond]` added to the result,
// the stream's end (`nil` after the buffer, once the producer finished) came back from
// `BufferedStream.next` as an element, over and over, in the debug build: a consumer's
// `for await` never ended (FacadeSecurityTests spun at 100 % of a core). The stream
// no longer passes its end as `Element??`.

import HCI
import L2CAP
@testable import SMP
import Testing

@Suite struct SecurityEventStreamTests {
    static func result() -> PairingResult {
        PairingResult(method: .justWorks, security: LinkSecurityState(), keys: PairingKeys(), bonding: true,
                      bondsEvicted: [Bond(address: BluetoothAddress("00:00:00:00:10:01")!, addressType: .public, keys: PairingKeys())])
    }

    /// What a consumer takes, at most `limit` elements (a stream that does not end is
    /// cut there, so the test fails instead of spinning).
    static func take(_ s: BufferedStream<SecurityEvent>, limit: Int) async -> [SecurityEvent] {
        var got: [SecurityEvent] = []
        for await e in s {
            got.append(e)
            if got.count >= limit { break }
        }
        return got
    }

    @Test func aFinishedStreamOfSecurityEventsEnds() async {
        let events: [SecurityEvent] = [.bondsChangedElsewhere, .paired(handle: 0x40, peer: BluetoothAddress("00:00:00:00:10:02")!, Self.result()),
                                       .securityChanged(handle: 0x40, LinkSecurityState())]
        // Finished while the consumer waits, and with elements buffered.
        let (waiting, toWaiting) = BufferedStream<SecurityEvent>.makeStream(capacity: 8)
        let consumer = Task { await Self.take(waiting, limit: 10) }
        toWaiting.finish()
        #expect(await consumer.value.isEmpty)
        let (buffered, toBuffered) = BufferedStream<SecurityEvent>.makeStream(capacity: 8)
        for e in events { toBuffered.yield(e) }
        toBuffered.finish()
        #expect(await Self.take(buffered, limit: 10) == events)
    }
}
