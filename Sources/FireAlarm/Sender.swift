// FireAlarmSender (peripheral): advertises the fire-alarm service, serves the alarm
// state, text and floor plan, indicates an alarm, streams the floor plan to each
// central that subscribes to it, and reports acknowledgements.

import BLE
import Foundation
import HCI

public actor FireAlarmSender {
    public nonisolated let host: BluetoothHost
    public let name: String
    private let text: String
    private let image: [UInt8]
    private let log: FireAlarmLog
    public nonisolated let alarmState: Characteristic
    public nonisolated let alarmText: Characteristic
    public nonisolated let floorPlan: Characteristic
    public nonisolated let acknowledge: Characteristic
    private var tasks: [Task<Void, Never>] = []
    public private(set) var isAlarm = false
    /// Who acknowledged, in order.
    public private(set) var acknowledgements: [String] = []
    /// The centrals connected now, as this sender has seen them come and go.
    public private(set) var centrals: Set<BluetoothAddress> = []

    public init(host: BluetoothHost, name: String = "FireAlarm", text: String = FireAlarmProfile.defaultText,
                floorPlan image: [UInt8] = FireAlarmProfile.defaultFloorPlan, log: @escaping FireAlarmLog) {
        self.host = host
        self.name = name
        self.text = text
        self.image = image
        self.log = log
        alarmState = Characteristic(uuid: FireAlarmProfile.alarmState, properties: [.read, .indicate], value: [0],
                                    descriptors: [.userDescription("Alarm state")])
        alarmText = Characteristic(uuid: FireAlarmProfile.alarmText, properties: [.read], value: Array(text.utf8),
                                   descriptors: [.userDescription("Alarm text")])
        floorPlan = Characteristic(uuid: FireAlarmProfile.floorPlan, properties: [.read, .notify], value: FireAlarmProfile.header(for: image),
                                   descriptors: [.userDescription("Floor plan (size, CRC-32; notifications carry the image)")])
        acknowledge = Characteristic(uuid: FireAlarmProfile.acknowledge, properties: [.write], maximumLength: 64,
                                     descriptors: [.userDescription("Acknowledge")])
    }

    private func emit(_ event: String, _ detail: String, _ fields: [String: FireAlarmField] = [:]) {
        log(FireAlarmEvent(role: "sender", event: event, detail: detail, fields: fields))
    }

    /// Publishes the service, starts advertising and follows the centrals.
    public func start() async throws {
        let service = Service(uuid: FireAlarmProfile.service, characteristics: [alarmState, alarmText, floorPlan, acknowledge])
        try await host.peripheral.add(service)
        var ad = AdvertisingData()
        ad.flags = 0x06
        ad.localName = name
        ad.txPowerLevel = FireAlarmProfile.advertisedTxPower
        var rsp = AdvertisingData()
        rsp.serviceUUIDs = [FireAlarmProfile.service]
        let events = host.peripheral.events(), links = host.connectionEvents()
        tasks.append(Task { [weak self] in for await e in events { await self?.handle(e) } })
        tasks.append(Task { [weak self] in for await e in links { await self?.handle(e) } })
        try await host.peripheral.startAdvertising(ad, scanResponse: rsp)
        let address = await host.info?.address.description ?? "?"
        emit("advertising", "\(name) at \(address), TX power \(FireAlarmProfile.advertisedTxPower) dBm, floor plan \(image.count) bytes",
             ["name": .text(name), "address": .text(address)])
    }

    public func stop() {
        for t in tasks { t.cancel() }
        tasks.removeAll()
    }

    /// Sets the alarm and indicates it; returns the centrals that confirmed.
    @discardableResult
    public func raiseAlarm() async throws -> [Connection] {
        isAlarm = true
        emit("alarm", "raised")
        let confirmed = try await host.peripheral.indicate(alarmState, value: [1])
        emit("indicated", "confirmed by \(confirmed.count) central(s)", ["confirmed": .text(confirmed.map(\.peer.description).joined(separator: ","))])
        return confirmed
    }

    public func clearAlarm() async throws {
        isAlarm = false
        try await host.peripheral.indicate(alarmState, value: [0])
        emit("cleared", "alarm cleared")
    }

    /// Waits until some central subscribes to the alarm state (at most `limit`).
    public func waitForSubscriber(within limit: Duration) async -> Bool {
        await waitUntil(within: limit) {
            if let s = try? await host.peripheral.subscribers(of: alarmState) { !s.isEmpty } else { false }
        }
    }

    /// Waits until a central's acknowledgement has been handled here (the central's write
    /// returns when our server took it; this side's event arrives a little later).
    public func waitForAcknowledgement(within limit: Duration) async -> Bool {
        await waitUntil(within: limit) { !acknowledgements.isEmpty }
    }

    /// Waits until every central has left, as this sender saw it (at most `limit`):
    /// the host has then handled the disconnection (and resumes advertising).
    public func waitForCentralsToLeave(within limit: Duration) async -> Bool {
        await waitUntil(within: limit) { centrals.isEmpty }
    }

    /// Whether `done` comes to hold within `limit` of the host's loop's time. `done` is
    /// looked at now and after each event this sender handles (what it waits on comes
    /// with one: a subscription, a write, a link's end), never on a timer of its own.
    private func waitUntil(within limit: Duration, _ done: () async -> Bool) async -> Bool {
        let id = nextWaiter
        nextWaiter += 1
        active.insert(id)
        let deadline = Task { [weak self, loop = host.loop] in
            // A loop that has shut down ends the wait at once.
            try? await loop.sleep(for: limit)
            guard !Task.isCancelled else { return }
            await self?.wake(id, timedOut: true)
        }
        defer {
            deadline.cancel()
            active.remove(id)
            timedOut.remove(id)
        }
        while true {
            // An event handled while `done` is suspended (it may ask the host) counts.
            let seen = changes
            if await done() { return true }
            if timedOut.remove(id) != nil { return false }
            if changes != seen { continue }
            await withCheckedContinuation { waiters[id] = $0 }
            if timedOut.remove(id) != nil { return await done() }
        }
    }

    /// Waits in `waitUntil`, by id, until the next event or their deadline.
    private var waiters: [Int: CheckedContinuation<Void, Never>] = [:]
    private var nextWaiter = 0
    /// Events handled so far; the waits going on, and those whose deadline passed.
    private var changes = 0
    private var active: Set<Int> = [], timedOut: Set<Int> = []

    /// Wakes wait `id`, or every wait (an event was handled: `id` nil).
    private func wake(_ id: Int?, timedOut: Bool = false) {
        if let id {
            if timedOut, active.contains(id) { self.timedOut.insert(id) }
            waiters.removeValue(forKey: id)?.resume()
        } else {
            changes += 1
            let all = waiters
            waiters.removeAll()
            for w in all.values { w.resume() }
        }
    }

    private func handle(_ e: ConnectionEvent) {
        defer { wake(nil) }
        switch e {
        case let .connected(c) where c.role == .peripheral:
            centrals.insert(c.peer)
            emit("connected", "central \(c.peer)", ["central": .text(c.peer.description)])
        case let .disconnected(c, reason) where c.role == .peripheral:
            centrals.remove(c.peer)
            emit("disconnected", "central \(c.peer): \(reason)", ["central": .text(c.peer.description), "reason": "\(reason)"])
        default:
            break
        }
    }

    private func handle(_ e: PeripheralEvent) {
        defer { wake(nil) }
        switch e {
        case let .subscriptionChanged(c, central, _, indicate) where c === alarmState:
            emit(indicate ? "subscribed" : "unsubscribed", "\(central.peer) \(indicate ? "to" : "from") the alarm state", ["central": .text(central.peer.description)])
        case let .subscriptionChanged(c, central, notify, _) where c === floorPlan && notify:
            tasks.append(Task { [weak self] in await self?.sendFloorPlan(to: central) })
        case let .written(c, value, central) where c === acknowledge:
            let who = String(decoding: value, as: UTF8.self)
            acknowledgements.append(who)
            emit("acknowledged", "\(who) (\(central.peer))", ["central": .text(central.peer.description), "by": .text(who)])
        default:
            break
        }
    }

    /// The image as notifications, each filling the central's ATT_MTU − 3, paced by the controller's buffers.
    private func sendFloorPlan(to central: Connection) async {
        let piece = await host.peripheral.maximumUpdateLength(for: central)
        let start = ContinuousClock.now
        var offset = 0, count = 0
        while offset < image.count {
            let chunk = Array(image[offset..<min(image.count, offset + piece)])
            guard let sent = try? await host.peripheral.notify(floorPlan, value: chunk, to: [central], storeValue: false), !sent.isEmpty else {
                emit("floor plan", "stopped after \(offset) bytes: \(central.peer) unsubscribed or left")
                return
            }
            offset += chunk.count
            count += 1
        }
        let ms = (ContinuousClock.now - start).milliseconds
        emit("floor plan", "sent \(image.count) bytes in \(count) notifications of ≤ \(piece) bytes (\(ms) ms)",
             ["bytes": .integer(image.count), "notifications": .integer(count)])
    }
}

extension Duration {
    var milliseconds: Int { Int(components.seconds * 1000 + components.attoseconds / 1_000_000_000_000_000) }
}
