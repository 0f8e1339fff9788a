// FireAlarmReceiver (central): scans for fire-alarm senders, connects to the nearest,
// subscribes to its alarm state; on an alarm reads the text, estimates the distance,
// downloads the floor plan and acknowledges. Reconnects when the link drops.

import BLE
import Foundation
import HCI

public actor FireAlarmReceiver {
    public nonisolated let host: BluetoothHost
    public let name: String
    private let log: FireAlarmLog
    private let scanTime: Duration
    private let saveDirectory: String?
    /// Floor plans downloaded, newest last.
    public private(set) var floorPlans: [[UInt8]] = []

    /// `scanTime`: how long to listen for senders before picking the nearest.
    public init(host: BluetoothHost, name: String = "receiver", scanTime: Duration = .seconds(1), saveDirectory: String? = nil,
                log: @escaping FireAlarmLog) {
        self.host = host
        self.name = name
        self.scanTime = scanTime
        self.saveDirectory = saveDirectory
        self.log = log
    }

    private func emit(_ event: String, _ detail: String, _ fields: [String: FireAlarmField] = [:]) {
        log(FireAlarmEvent(role: "receiver", event: event, detail: detail, fields: fields))
    }

    /// Runs until cancelled, or (with `once`) until one alarm has been handled.
    public func run(once: Bool = false) async throws {
        while !Task.isCancelled {
            guard let target = try await findNearest() else { continue }
            do {
                if try await session(with: target, once: once), once { return }
            } catch let e as BLEError {
                switch e {
                case .disconnected, .connectionTimeout, .connectionFailed:
                    emit("link lost", "\(e); scanning again", ["error": "\(e)"])
                    try await host.loop.sleep(for: .milliseconds(200))
                default:
                    throw e
                }
            }
        }
    }

    /// Listens for `scanTime` and returns the sender that looks nearest (smallest
    /// distance estimate, else strongest RSSI); nil if none was heard.
    private func findNearest() async throws -> ScanResult? {
        emit("scanning", "for fire-alarm senders (\(scanTime))")
        // Every report the controller sent before it answered the scan stop counts:
        // the choice follows the HCI conversation, so a replay makes the same one.
        var seen: [BluetoothAddress: ScanResult] = [:]
        for r in try await host.central.scan(for: scanTime, filter: ScanFilter(serviceUUIDs: [FireAlarmProfile.service]))
        where r.device.isConnectable {
            seen[r.address] = r
        }
        // Ties go to the lower address, not to the dictionary's order.
        let ranked = seen.values.sorted { a, b in
            (a.estimatedMetres ?? .infinity, -Int(a.device.smoothedRSSI ?? -127), a.address.description)
                < (b.estimatedMetres ?? .infinity, -Int(b.device.smoothedRSSI ?? -127), b.address.description)
        }
        guard let best = ranked.first else {
            emit("nothing heard", "no sender within \(scanTime)")
            return nil
        }
        let metres = best.estimatedMetres.map { String(format: "~%.1f m", $0) } ?? "distance unknown"
        let level = best.device.smoothedRSSI.map { "\(Int($0.rounded())) dBm" } ?? "RSSI not available"
        emit("found", "\(best.name ?? "?") at \(best.address), \(level), \(metres) (\(seen.count) sender(s) heard)",
             ["address": .text(best.address.description), "name": .text(best.name ?? ""), "rssi": .integer(Int(best.rssi))])
        return best
    }

    /// One connection: subscribe, wait for alarms. Returns true once an alarm was handled.
    private func session(with target: ScanResult, once: Bool) async throws -> Bool {
        let p = try await host.central.connect(to: target, within: .seconds(10))
        emit("connected", "\(p.address), ATT MTU \(await p.mtu)", ["address": .text(p.address.description)])
        let state = try await p.characteristic(FireAlarmProfile.alarmState)
        let alarms = try await p.subscribe(to: state)
        emit("subscribed", "to the alarm state")
        var handled = false
        if try await p.read(state).first == 1 {
            try await handle(p)
            handled = true
            if once { try await p.disconnect(); return true }
        }
        emit("watching", "no alarm now; waiting for one")
        for try await v in alarms {
            if v.first == 1 {
                try await handle(p)
                handled = true
                if once { try await p.disconnect(); return true }
            } else {
                emit("all clear", "the alarm was cleared")
            }
        }
        return handled
    }

    private func handle(_ p: RemotePeripheral) async throws {
        emit("ALARM", "from \(p.address)")
        let text = String(decoding: try await p.read(try await p.characteristic(FireAlarmProfile.alarmText)), as: UTF8.self)
        emit("text", text, ["text": .text(text)])
        let (rssi, metres) = try await p.estimateDistance()
        let rssiText = rssi.map { "RSSI \($0) dBm" } ?? "no RSSI from this controller"
        emit("distance", rssiText + " → " + (metres.map { String(format: "~%.1f m", $0) } ?? "distance unknown"),
             ["rssi": rssi.map { .integer(Int($0)) } ?? .text(""), "metres": metres.map { .number(($0 * 100).rounded() / 100) } ?? .text("")])
        let image = try await downloadFloorPlan(p)
        let who = name
        try await p.write(Array(who.utf8), to: try await p.characteristic(FireAlarmProfile.acknowledge))
        emit("acknowledged", "as \(who)")
        floorPlans.append(image)
    }

    private func downloadFloorPlan(_ p: RemotePeripheral) async throws -> [UInt8] {
        let plan = try await p.characteristic(FireAlarmProfile.floorPlan)
        guard let header = FireAlarmProfile.parseHeader(try await p.read(plan)) else { throw BLEError.notSupported("the floor-plan header is not 8 bytes") }
        let start = ContinuousClock.now
        var image: [UInt8] = [], pieces = 0
        // Collect the notifications until the announced size; at most 30 s.
        try await withThrowingTaskGroup(of: ([UInt8], Int)?.self) { g in
            g.addTask {
                let chunks = try await p.subscribe(to: plan, capacity: 65_536)
                var got: [UInt8] = [], n = 0
                for try await c in chunks {
                    got += c
                    n += 1
                    if got.count >= header.size { break }
                }
                return (got, n)
            }
            g.addTask {
                try await self.host.loop.sleep(for: .seconds(30))
                return nil
            }
            let first = try await g.next() ?? nil
            g.cancelAll()
            guard let (got, n) = first else { throw BLEError.notSupported("floor plan incomplete after 30 s") }
            image = got
            pieces = n
        }
        try await p.unsubscribe(from: plan)
        let ms = (ContinuousClock.now - start).milliseconds
        let ok = image.count == header.size && FireAlarmProfile.crc32(image) == header.crc
        var detail = "\(image.count) bytes in \(pieces) notifications, \(ms) ms, CRC-32 \(ok ? "ok" : "MISMATCH")"
        if let dir = saveDirectory {
            let path = dir + "/floor-plan-\(p.address.description.replacingOccurrences(of: ":", with: "")).svg"
            detail += FileManager.default.createFile(atPath: path, contents: Data(image)) ? ", saved to \(path)" : ", NOT saved (cannot write \(path))"
        }
        emit("floor plan", detail, ["bytes": .integer(image.count), "crc_ok": .flag(ok)])
        guard ok else { throw BLEError.notSupported("floor plan damaged: \(image.count) of \(header.size) bytes, CRC mismatch") }
        return image
    }
}
