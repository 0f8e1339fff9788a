// The whole fire-alarm session on the in-process virtual radio: a sender and a
// receiver, each with its own software controller, 3.5 m apart. No hardware, no
// Rootcanal, no root. `btctl demo` and the examples' `--transport virtual` run it.

import BLE
import Foundation
import HCI
import VirtualHCI
import Logging

public enum FireAlarmDemo {
    public struct Outcome: Sendable {
        /// The floor plan the receiver downloaded (and checked against its CRC-32).
        public var floorPlan: [UInt8]
        /// Who the sender saw acknowledge.
        public var acknowledgements: [String]
    }

    /// Runs sender and receiver until the receiver has handled one alarm (the sender
    /// raises it `alarmAfter` the receiver, subscribed, read the alarm state clear and
    /// said it is watching: an order of events, not a race between two timers, so
    /// both conversations are the same every run); at most `limit`. The receiver
    /// listens `scanTime` before it picks the nearest sender. `recordSenderTo` and
    /// `recordReceiverTo` record each host's HCI conversation (btsnoop, pcap or pcapng
    /// by the extension), complete when this returns.
    public static func run(distance: Double = 3.5, alarmAfter: Duration = .milliseconds(300), scanTime: Duration = .milliseconds(300),
                           limit: Duration = .seconds(30), saveDirectory: String? = nil,
                           recordSenderTo: String? = nil, recordReceiverTo: String? = nil,
                           logger: Logger = Logger(label: "demo") { _ in SwiftLogNoOpLogHandler() },
                           log: @escaping FireAlarmLog) async throws -> Outcome {
        let radio = VirtualRadio()
        let senderAddress = BluetoothAddress("C0:FF:EE:00:00:01")!, receiverAddress = BluetoothAddress("C0:FF:EE:00:00:02")!
        await radio.setDistance(distance, between: senderAddress, and: receiverAddress)
        func host(_ address: BluetoothAddress, recordingTo path: String?) async throws -> BluetoothHost {
            let controller = await radio.makeController(address: address)
            guard let path else { return BluetoothHost(transport: controller, logger: logger) }
            return try BluetoothHost(transport: controller, recordingTo: path, logger: logger)
        }
        let senderHost = try await host(senderAddress, recordingTo: recordSenderTo)
        let receiverHost = try await host(receiverAddress, recordingTo: recordReceiverTo)
        // Advertising is heard as the radio's time passes, here every 50 ms of its loop's.
        let ticker = radio.tick(every: .milliseconds(50))
        defer { ticker.cancel() }
        try await senderHost.start()
        try await receiverHost.start()
        log(FireAlarmEvent(role: "radio", event: "virtual", detail: "sender \(senderAddress) and receiver \(receiverAddress), \(distance) m apart"))
        // The receiver's "watching" (it read the alarm state clear) arms the alarm.
        let (armed, arm) = AsyncStream<Void>.makeStream(bufferingPolicy: .bufferingNewest(1))
        let receiverLog: FireAlarmLog = { event in
            log(event)
            if event.event == "watching" { arm.yield() }
        }
        let sender = FireAlarmSender(host: senderHost, name: "FireAlarm-B3", log: log)
        let receiver = FireAlarmReceiver(host: receiverHost, name: "receiver-\(receiverAddress.description.suffix(2))",
                                         scanTime: scanTime, saveDirectory: saveDirectory, log: receiverLog)
        try await sender.start()
        do {
            try await withThrowingTaskGroup(of: Void.self) { g in
                g.addTask { try await receiver.run(once: true) }
                g.addTask {
                    var watching = armed.makeAsyncIterator()
                    guard await watching.next() != nil, await sender.waitForSubscriber(within: limit) else { return }
                    try await senderHost.loop.sleep(for: alarmAfter)
                    try await sender.raiseAlarm()
                }
                g.addTask {
                    try await receiverHost.loop.sleep(for: limit)
                    throw BLEError.notSupported("the demo did not finish within \(limit)")
                }
                // Done when the receiver is, after the sender's alarm task.
                _ = try await g.next()
                _ = try await g.next()
                g.cancelAll()
            }
        } catch {
            await sender.stop()
            await senderHost.close()
            await receiverHost.close()
            throw error
        }
        // The receiver's acknowledgement reaches the sender's event task asynchronously
        // (a loaded machine took longer than a fixed pause): wait for it, bounded.
        _ = await sender.waitForAcknowledgement(within: .seconds(5))
        // The sender's host handles the receiver's disconnection (and resumes advertising)
        // before it closes, however loaded the machine: every run ends at the same place.
        _ = await sender.waitForCentralsToLeave(within: .seconds(5))
        let outcome = Outcome(floorPlan: await receiver.floorPlans.last ?? [], acknowledgements: await sender.acknowledgements)
        await sender.stop()
        await senderHost.close()
        await receiverHost.close()
        return outcome
    }
}
