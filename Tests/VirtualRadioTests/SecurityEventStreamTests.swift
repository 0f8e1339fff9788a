// A stream of `SecurityEvent`s ends once the producer finished: at once when nothing
// is buffered, else after what is. (Written when a finished stream of
// them handed out elements forever after `PairingResult` gained `bondsEvicted`; that
// turned out to be an incremental debug build that had not rebuilt everything the
// new layout touched, and a full rebuild passed with the stream unchanged. Kept: a
// bounded check that the facade's security events end, cut at 10 elements so a
// stream that does not end fails here instead of spinning.)

import HCI
import L2CAP
@testable import SMP
import Testing

@Suite(.timeLimit(.minutes(3))) struct SecurityEventStreamTests {
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
        // Finished with nothing buffered (before or while the consumer waits, as the
        // scheduler has it), and with elements buffered.
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
