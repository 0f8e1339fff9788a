// The fire-alarm example in-process: the whole session, and the receiver's
// reconnection when the link drops.

import BLE
import BLETesting
import FireAlarm
import NIOCore
import NIOEmbedded
import Synchronization
import Testing

final class EventLog: Sendable {
    private let events = Mutex<[FireAlarmEvent]>([])
    var all: [FireAlarmEvent] { events.withLock { $0 } }
    var log: FireAlarmLog { { e in self.events.withLock { $0.append(e) } } }
    func count(_ role: String, _ event: String) -> Int { all.filter { $0.role == role && $0.event == event }.count }
}

@Suite(.timeLimit(.minutes(3))) struct FireAlarmSessionTests {
    @Test func demoDownloadsTheFloorPlanIntact() async throws {
        let log = EventLog()
        let outcome = try await FireAlarmDemo.run(distance: 5, log: log.log)
        #expect(outcome.floorPlan == FireAlarmProfile.defaultFloorPlan)
        #expect(outcome.acknowledgements.count == 1)
        // 5 m gives −54.98 dBm, reported as the integer −55, which the model reads back as 5.01 m.
        #expect(log.all.first { $0.event == "distance" }?.fields["rssi"] == .integer(-55))
        #expect(log.all.first { $0.event == "distance" }?.fields["metres"] == .number(5.01))
    }

    @Test func receiverReconnectsWhenTheLinkDrops() async throws {
        let radio = VirtualRadio()
        let sa = BluetoothAddress("C0:FF:EE:00:01:01")!, ra = BluetoothAddress("C0:FF:EE:00:01:02")!
        let senderHost = BluetoothHost(transport: await radio.makeController(address: sa), logger: Bench.logger)
        let receiverHost = BluetoothHost(transport: await radio.makeController(address: ra), logger: Bench.logger)
        let ticker = radio.tick(every: .milliseconds(20))
        defer { ticker.cancel() }
        try await senderHost.start()
        try await receiverHost.start()
        let log = EventLog()
        let sender = FireAlarmSender(host: senderHost, log: log.log)
        try await sender.start()
        let receiver = FireAlarmReceiver(host: receiverHost, scanTime: .milliseconds(100), log: log.log)
        let run = Task { try await receiver.run(once: true) }
        defer { run.cancel() }
        // First link: the sender drops it once the receiver has subscribed.
        #expect(await sender.waitForSubscriber(within: .seconds(10)))
        for c in await senderHost.connections { try await senderHost.disconnect(c) }
        // The receiver scans again, reconnects and subscribes; then the alarm is handled.
        // (Its first subscription is gone once the sender has seen that central leave.)
        #expect(await sender.waitForCentralsToLeave(within: .seconds(10)))
        #expect(await sender.waitForSubscriber(within: .seconds(10)))
        try await sender.raiseAlarm()
        let finished = await firstElement(AsyncStream<Bool> { c in Task { c.yield((try? await run.value) != nil); c.finish() } }, within: .seconds(10))
        #expect(finished == true)
        #expect(log.count("receiver", "link lost") == 1)
        #expect(log.count("receiver", "connected") == 2)
        #expect(log.count("receiver", "floor plan") == 1)
        #expect(await sender.acknowledgements.count == 1)
        await sender.stop()
        await senderHost.close()
        await receiverHost.close()
    }

    /// The sender's waits end at their deadline in the host's loop's time, not the wall
    /// clock's: on a testing loop, 5 s of the loop's time pass in milliseconds of
    /// wall-clock time and the wait for a subscriber nobody makes ends false; a wait
    /// that holds already (no central to leave) ends true with no time passing.
    @Test func theSendersWaitsEndOnTheLoopsTime() async throws {
        let loop = NIOAsyncTestingEventLoop()
        let room = try await Room(peripherals: 1, radio: VirtualRadio(loop: loop))
        defer { Task { await room.close() } }
        let sender = FireAlarmSender(host: room.peripherals[0], log: EventLog().log)
        try await sender.start()
        let start = loop.now, wall = ContinuousClock.now
        #expect(await sender.waitForCentralsToLeave(within: .seconds(5)))
        #expect(loop.now == start)
        let subscribed = try await loop.advancing(by: .milliseconds(250)) { await sender.waitForSubscriber(within: .seconds(5)) }
        #expect(!subscribed)
        #expect(loop.now >= start + TimeAmount.seconds(5))
        #expect(ContinuousClock.now - wall < .seconds(5))
        await sender.stop()
    }
}
