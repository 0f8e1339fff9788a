// Periodic advertising (Core Specification v5.4, Vol 6, Part B, §4.4.2.12; Vol 4,
// Part E, §7.8.61–§7.8.69), both sides, as Bumble's `start_periodic` and
// `create_periodic_advertising_sync`, Android's periodic advertising sets and
// `registerSync`, and BlueZ's kernel PA sync offer it:
//
// - A peripheral adds a periodic train to one of its advertising sets
//   (`PeripheralManager.startPeriodicAdvertising`): fixed-interval packets that carry
//   data without the three primary channels' contention, and that a scanner follows by
//   their timing once it has found the set.
// - A central synchronises to a train it heard in an extended advertisement
//   (`Central.synchronize`) and receives each packet's data in a bounded stream until
//   it terminates the sync or the controller loses the train.

import GAP
import HCI

// MARK: Advertiser

/// A set's periodic advertising: its data and interval.
struct PeriodicConfiguration: Sendable, Equatable {
    var data: AdvertisingData
    var intervalMilliseconds: Double

    /// Periodic_Advertising_Interval in 1.25 ms units.
    var units: UInt16 { UInt16((intervalMilliseconds / 1.25).rounded()) }

    /// The interval LE Set Periodic Advertising Parameters takes: 7.5 ms to 81.91875 s.
    static let intervals: ClosedRange<Double> = 7.5...81_918.75
}

extension PeripheralManager {
    /// Adds periodic advertising to `set` (`addAdvertisingSet`): the controller sends
    /// `data` (up to the controller's maximum advertising data, 1650 octets at most)
    /// every `intervalMilliseconds` (7.5 ms to 81.92 s), and the set's extended
    /// advertisements point scanners at the train (`Central.synchronize`). The set must
    /// be neither connectable nor have a scan response (§7.8.61; else
    /// `BLEError.invalidArgument`); a set advertising legacy PDUs restarts with extended
    /// ones, which only extended scanners hear. Calling it again replaces the data (and
    /// interval): whole data of up to 252 octets changes on air without interrupting
    /// the train; longer data, or a new interval, restarts it, and scanners following
    /// it lose it. The train goes on after the set's own limits (`duration`,
    /// `maximumEvents`) end its advertisements, until `stopPeriodicAdvertising` or
    /// `removeAdvertisingSet`; on a set they ended already it starts alone, and
    /// scanners find it once the set advertises again (`updateAdvertisingSet`). Needs
    /// a controller with LE Periodic Advertising driven with the extended commands
    /// (else `BLEError.notSupported`).
    public func startPeriodicAdvertising(on set: AdvertisingSet, data: AdvertisingData, intervalMilliseconds: Double = 100) async throws {
        try await host.setPeriodicAdvertising(PeriodicConfiguration(data: data, intervalMilliseconds: intervalMilliseconds), set: set)
    }

    /// Stops `set`'s periodic advertising (its advertisements go on); scanners following
    /// it lose it after their sync timeout.
    public func stopPeriodicAdvertising(on set: AdvertisingSet) async throws {
        try await host.setPeriodicAdvertising(nil, set: set)
    }
}

extension BluetoothHost {
    /// Whether the controller has periodic advertising and the host drives it with the extended commands.
    var supportsPeriodicAdvertising: Bool {
        guard usesExtendedCommands, let i = info else { return false }
        return i.leFeatures.contains(bit: LEFeatures.periodicAdvertising) && i.supports(.leSetPeriodicAdvertisingParameters)
            && i.supports(.leSetPeriodicAdvertisingData) && i.supports(.leSetPeriodicAdvertisingEnable)
    }

    func requirePeriodicAdvertising() throws {
        guard supportsPeriodicAdvertising else {
            throw BLEError.notSupported("periodic advertising needs a controller with LE Periodic Advertising, driven with the extended commands (usesExtendedCommands)")
        }
    }

    /// Starts, changes or (nil) stops set `set`'s periodic advertising.
    func setPeriodicAdvertising(_ p: PeriodicConfiguration?, set: AdvertisingSet) async throws {
        try requireReady()
        try requireAdvertisingSet(set)
        try requirePeriodicAdvertising()
        let handle = set.handle
        if let p {
            try Self.validate(p, maximumLength: info?.maximumAdvertisingDataLength ?? LESetExtendedAdvertisingParameters.hostAdvertisingDataLimit)
        }
        try await withAdvertisingLock {
            guard var a = peripheralState.advertising[handle] else { throw BLEError.unknownAdvertisingSet(handle) }
            if p != nil, a.connectable || a.scanResponse != nil {
                throw BLEError.invalidArgument("periodic advertising needs a set that is neither connectable nor scannable (no scan response); \(set) is \(a.connectable ? "connectable" : "scannable")")
            }
            let previous = a.periodic
            a.periodic = p
            peripheralState.advertising[handle] = a
            do {
                // The set's own PDUs become extended ones when it carried legacy PDUs
                // (it did when it had no train and its data fits them, §7.8.61).
                let (_, _, properties) = try Advertiser.extendedPDUs(data: a.data, scanResponse: a.scanResponse, connectable: a.connectable,
                                                                     maximumLength: info?.maximumAdvertisingDataLength ?? 31, extended: a.phys != .le1M)
                if p != nil, previous == nil, properties & 0x10 != 0 {
                    if peripheralState.setsOnAir.contains(handle) {
                        try await startAdvertisingNow(a, set: handle)
                    } else {
                        // Off air (a limit ended it, or a link it made holds it): set up
                        // again with extended PDUs, not enabled; the train goes on its own.
                        try await configureAdvertisingOffAir(a, set: handle)
                        try await applyPeriodic(p, set: handle)
                    }
                } else {
                    try await applyPeriodic(p, set: handle)
                }
            } catch {
                peripheralState.advertising[handle]?.periodic = previous
                throw error
            }
        }
    }

    static func validate(_ p: PeriodicConfiguration, maximumLength: Int) throws {
        guard PeriodicConfiguration.intervals.contains(p.intervalMilliseconds) else {
            throw BLEError.invalidArgument("a periodic advertising interval is 7.5 ms to 81918.75 ms, not \(p.intervalMilliseconds) ms")
        }
        let n = p.data.bytes.count
        guard n <= maximumLength else { throw AdvertisingDataError.tooLong(length: n, limit: maximumLength) }
    }

    /// Brings set `set`'s periodic advertising on the controller to `p` (nil: off).
    /// Whole data of up to 252 octets replaces what a running train carries in one
    /// command; a new interval or longer data stops the train first (§7.8.61, §7.8.62).
    func applyPeriodic(_ p: PeriodicConfiguration?, set: UInt8) async throws {
        let current = peripheralState.periodicOnAir[set]
        guard current != p else { return }
        guard let p else {
            peripheralState.periodicOnAir[set] = nil
            try await controller.send(LESetPeriodicAdvertisingEnable(enable: false, advertisingHandle: set))
            return
        }
        let data = p.data.bytes
        if let current, current.units == p.units, data.count <= LESetPeriodicAdvertisingData.maximumFragmentLength {
            try await controller.send(LESetPeriodicAdvertisingData(advertisingHandle: set, data: data))
            peripheralState.periodicOnAir[set] = p
            return
        }
        if current != nil {
            peripheralState.periodicOnAir[set] = nil
            try await controller.send(LESetPeriodicAdvertisingEnable(enable: false, advertisingHandle: set))
        }
        try await controller.send(LESetPeriodicAdvertisingParameters(advertisingHandle: set, periodicAdvertisingIntervalMin: p.units,
                                                                     periodicAdvertisingIntervalMax: p.units))
        for c in LESetPeriodicAdvertisingData.fragments(data, handle: set) { try await controller.send(c) }
        try await controller.send(LESetPeriodicAdvertisingEnable(enable: true, advertisingHandle: set))
        peripheralState.periodicOnAir[set] = p
    }
}

// MARK: Scanner

/// One periodic advertising packet's data, as the controller reported it (pieces joined).
public struct PeriodicAdvertisement: Hashable, Sendable {
    public var data: AdvertisingData
    public var raw: [UInt8]
    /// nil: the controller did not say.
    public var rssi: Int8?
    /// The advertiser's transmit power, when its packets carry it.
    public var txPower: Int8?
    /// The controller could not receive the whole packet (Data_Status "truncated"): `raw` is what arrived.
    public var isTruncated: Bool
}

/// A periodic advertising train this host follows (`Central.synchronize`).
public final class PeriodicAdvertisingSync: Sendable, CustomStringConvertible {
    /// The controller's Sync_Handle.
    public let handle: UInt16
    public let advertiser: BluetoothAddress
    public let advertiserAddressType: AddressType
    /// The advertiser's Advertising_SID.
    public let sid: UInt8
    /// How often the train's packets come.
    public let interval: Duration
    /// Each packet's data, in the order received. Buffer: the newest `capacity` (given
    /// to `synchronize`); `advertisements.dropped` counts the rest. Finishes when
    /// `terminate()` is called, and with `BLEError.periodicSyncLost` when the
    /// controller loses the train (no packet within the sync timeout, or a reset), or
    /// `BLEError.transportClosed`. Letting go of it terminates the sync.
    public let advertisements: BufferedThrowingStream<PeriodicAdvertisement>
    let host: BluetoothHost

    init(handle: UInt16, advertiser: BluetoothAddress, advertiserAddressType: AddressType, sid: UInt8, interval: Duration,
         advertisements: BufferedThrowingStream<PeriodicAdvertisement>, host: BluetoothHost) {
        self.handle = handle
        self.advertiser = advertiser
        self.advertiserAddressType = advertiserAddressType
        self.sid = sid
        self.interval = interval
        self.advertisements = advertisements
        self.host = host
    }

    /// The train's advertiser and set.
    public var source: PeriodicAdvertiser { PeriodicAdvertiser(address: advertiser, type: advertiserAddressType, sid: sid) }

    /// Stops following the train (LE Periodic Advertising Terminate Sync); the stream
    /// finishes. Nothing happens when the sync has already ended.
    public func terminate() async throws { try await host.terminateSync(handle) }

    public var description: String { "periodic advertising sync \(handle) with \(advertiser) (SID \(sid))" }
}

/// A periodic advertising train's source: an advertiser's extended advertising set,
/// which the advertiser's Advertising_SID names.
public struct PeriodicAdvertiser: Hashable, Sendable, CustomStringConvertible {
    public var address: BluetoothAddress
    public var addressType: AddressType
    /// The set's Advertising_SID (0 to 15).
    public var sid: UInt8

    public init(address: BluetoothAddress, type: AddressType, sid: UInt8) {
        self.address = address
        self.addressType = type
        self.sid = sid
    }

    /// The train `result` announces; nil when its advertisement announces none (no
    /// `periodicAdvertisingInterval`).
    public init?(_ result: ScanResult) {
        guard let sid = result.advertisement.advertisingSID, result.advertisement.periodicAdvertisingInterval != nil else { return nil }
        self.init(address: result.address, type: result.addressType, sid: sid)
    }

    public var description: String { "\(address) (SID \(sid))" }

    /// "A", "A or B", "A, B or C".
    static func list(_ a: [PeriodicAdvertiser]) -> String {
        let names = a.map(\.description)
        guard names.count > 1 else { return names.first ?? "nobody" }
        return names.dropLast().joined(separator: ", ") + " or " + names[names.count - 1]
    }
}

extension Central {
    /// Synchronises to the periodic advertising of the set `sid` of `address` (LE
    /// Periodic Advertising Create Sync) and returns once the controller has found the
    /// train. The host scans (passively, unless a scan is running) until then, since
    /// only a scanning controller hears the set's pointer to its train. One sync is
    /// created at a time; others wait their turn.
    ///
    /// - `within`: how long to look; then LE Periodic Advertising Create Sync Cancel and
    ///   `BLEError.periodicSyncTimeout`. Cancelling the task cancels the same way and
    ///   throws `CancellationError`.
    /// - `skip` (0 to 499): how many packets in a row the controller may skip.
    /// - `timeout` (100 ms to 163.84 s): the sync is lost after this long without a packet.
    /// - `capacity`: the buffer of `PeriodicAdvertisingSync.advertisements`.
    ///
    /// - `phys`: the primary PHYs the scan meanwhile listens on (LE Coded for a set
    ///   advertising long range).
    ///
    /// A controller's refusal is `BLEError.periodicSyncFailed`; one without LE Periodic
    /// Advertising, or driven with the legacy commands, `BLEError.notSupported`.
    public func synchronize(to address: BluetoothAddress, type: AddressType, sid: UInt8, within limit: Duration = .seconds(10),
                            skip: Int = 0, timeout: Duration = .seconds(2), capacity: Int = 256,
                            phys: Set<PHY> = [.le1M]) async throws -> PeriodicAdvertisingSync {
        try await synchronize(toAnyOf: [PeriodicAdvertiser(address: address, type: type, sid: sid)], within: limit, skip: skip,
                              timeout: timeout, capacity: capacity, phys: phys)
    }

    /// Synchronises to the periodic advertising `result` announces (its
    /// `periodicAdvertisingInterval` is set); see `synchronize(to:type:sid:…)`.
    /// `BLEError.invalidArgument` when the advertisement announces none. The scan
    /// meanwhile listens on the PHY `result` came on (LE Coded for a long-range set).
    public func synchronize(to result: ScanResult, within limit: Duration = .seconds(10), skip: Int = 0,
                            timeout: Duration = .seconds(2), capacity: Int = 256) async throws -> PeriodicAdvertisingSync {
        guard let source = PeriodicAdvertiser(result) else {
            throw BLEError.invalidArgument("\(result.address) announces no periodic advertising in this advertisement")
        }
        return try await synchronize(toAnyOf: [source], within: limit, skip: skip, timeout: timeout, capacity: capacity,
                                     phys: result.primaryPHY == .leCoded ? [.leCoded] : [.le1M])
    }

    /// Synchronises to whichever of `advertisers`' trains the controller finds first,
    /// through its Periodic Advertiser List (LE Periodic Advertising Create Sync with
    /// Options bit 0), as a receiver that follows any one of several broadcasters does;
    /// the returned sync's `advertiser` and `sid` say which. The host owns the list: it
    /// fills it with `advertisers` for this sync (duplicates count once). A list longer
    /// than the controller's (LE Read Periodic Advertiser List Size) is
    /// `BLEError.invalidArgument`; one advertiser is looked for directly, without the
    /// list. A train this host already follows is not chosen again. Otherwise as
    /// `synchronize(to:type:sid:…)`.
    public func synchronize(toAnyOf advertisers: [PeriodicAdvertiser], within limit: Duration = .seconds(10), skip: Int = 0,
                            timeout: Duration = .seconds(2), capacity: Int = 256, phys: Set<PHY> = [.le1M]) async throws -> PeriodicAdvertisingSync {
        try await host.synchronize(toAnyOf: advertisers, within: limit, skip: skip, timeout: timeout, capacity: capacity, phys: phys)
    }
}

extension BluetoothHost {
    struct SyncWaiter {
        /// The trains looked for (more than one: through the Periodic Advertiser List).
        var advertisers: [PeriodicAdvertiser]
        var capacity: Int
        var continuation: CheckedContinuation<PeriodicAdvertisingSync, any Error>
        var timer: LoopTimer
        /// The wait ended before the controller answered: LE Periodic Advertising Create Sync Cancel is owed.
        var cancelOwed = false
    }

    struct SyncSubscriber {
        var sync: PeriodicAdvertisingSync
        var continuation: BufferedThrowingStream<PeriodicAdvertisement>.Continuation
        /// The pieces of a packet so far (Data_Status "more to come").
        var partial: [UInt8] = []
    }

    /// The host's state for periodic advertising syncs.
    struct SyncState {
        var waiter: SyncWaiter?
        /// The sync being created, and those waiting their turn (the controller takes one at a time).
        var busy = false
        var queue: [CheckedContinuation<Void, Never>] = []
        var syncs: [UInt16: SyncSubscriber] = [:]
        /// LE Periodic Advertising Sync Established with Operation Cancelled by Host
        /// owed by cancels the controller accepted: each is the answer to one of them.
        var cancelsOwed = 0
        /// The controller reports the periodic advertising events (LE event mask).
        var eventsUnmasked = false
        /// Whether the latest wait ended with its cancel owed (read by `synchronize`).
        var lastCancelOwed = false
        /// The controller's Periodic Advertiser List size, read the first time the list is used.
        var advertiserListSize: Int?
    }

    /// Advertiser_Address_Type for `type`: a resolved identity is named by its kind (0 public, 1 random).
    static func advertiserAddressType(_ type: AddressType) -> AddressType { AddressType(rawValue: type.rawValue & 1) }

    func synchronize(toAnyOf advertisers: [PeriodicAdvertiser], within limit: Duration, skip: Int, timeout: Duration,
                     capacity: Int, phys: Set<PHY>) async throws -> PeriodicAdvertisingSync {
        await settle()
        try requireReady()
        guard usesExtendedCommands, let i = info, i.leFeatures.contains(bit: LEFeatures.periodicAdvertising),
              i.supports(.lePeriodicAdvertisingCreateSync), i.supports(.lePeriodicAdvertisingCreateSyncCancel) else {
            throw BLEError.notSupported("synchronising to periodic advertising needs a controller with LE Periodic Advertising, driven with the extended commands (usesExtendedCommands)")
        }
        let targets = advertisers.withoutDuplicates
        guard !targets.isEmpty else { throw BLEError.invalidArgument("synchronising needs at least one advertiser") }
        if let bad = targets.first(where: { $0.sid > 0x0F }) { throw BLEError.invalidArgument("an Advertising_SID is 0 to 15, not \(bad.sid)") }
        guard (0...0x01F3).contains(skip) else { throw BLEError.invalidArgument("skip is 0 to 499 packets, not \(skip)") }
        guard timeout >= .milliseconds(100), timeout <= .milliseconds(163_840) else {
            throw BLEError.invalidArgument("a sync timeout is 100 ms to 163.84 s, not \(timeout)")
        }
        guard capacity > 0 else { throw BLEError.invalidArgument("capacity is at least 1, not \(capacity)") }
        if targets.count > 1 {
            guard i.supports(.leAddDeviceToPeriodicAdvertiserList), i.supports(.leClearPeriodicAdvertiserList),
                  i.supports(.leReadPeriodicAdvertiserListSize) else {
                throw BLEError.notSupported("synchronising to any of several advertisers needs a controller with the Periodic Advertiser List")
            }
        }
        await acquireSyncSlot()
        defer { releaseSyncSlot() }
        try Task.checkCancellation()
        // Of several, those this host does not follow yet (a controller may synchronise
        // to a listed train twice). One is asked for directly: a controller that follows
        // it already answers Connection Already Exists.
        let looking = targets.count > 1 ? targets.filter { !isFollowing($0) } : targets
        guard let first = looking.first else { throw BLEError.periodicSyncFailed(targets, .connectionAlreadyExists) }
        let useList = looking.count > 1
        if !syncState.eventsUnmasked {
            try await controller.send(LESetEventMask(leEventMask: LESetEventMask.hostDefault | LESetEventMask.periodicAdvertisingEvents))
            syncState.eventsUnmasked = true
        }
        if useList { try await fillPeriodicAdvertiserList(looking) }
        // The controller hears the set's pointer to its train only while it scans.
        // (Its results are not read: the newest is kept, the rest counted as dropped. The
        // stream is held until `endScan`, since letting go of it stops the scan.)
        let (scan, results) = try await addScan(filter: ScanFilter(addresses: looking.map(\.address)),
                                                ScanSettings(active: false, filterDuplicates: true, acceptListOnly: false, phys: PHY.bits(phys)), capacity: 1)
        let command = LEPeriodicAdvertisingCreateSync(options: useList ? 0x01 : 0x00, advertisingSID: useList ? 0 : first.sid,
                                                      advertiserAddressType: useList ? .public : Self.advertiserAddressType(first.addressType),
                                                      advertiserAddress: useList ? .zero : first.address, skip: UInt16(skip),
                                                      syncTimeout: UInt16(timeout / .milliseconds(10)))
        let result: Result<PeriodicAdvertisingSync, any Error>
        do {
            result = .success(try await withTaskCancellationHandler {
                try await withCheckedThrowingContinuation { (k: CheckedContinuation<PeriodicAdvertisingSync, any Error>) in
                    let timer = LoopTimer(after: limit, on: loop) { [weak self] in
                        self?.onLoop { $0.abandonSync(BLEError.periodicSyncTimeout(targets, within: limit)) }
                    }
                    syncState.lastCancelOwed = false
                    syncState.waiter = SyncWaiter(advertisers: looking, capacity: capacity, continuation: k, timer: timer)
                    Task {
                        do { try await self.controller.send(command) } catch { self.abandonSync(error, cancel: false) }
                    }
                }
            } onCancel: {
                Task { await self.abandonSync(CancellationError()) }
            })
        } catch {
            result = .failure(error)
        }
        if syncState.lastCancelOwed {
            syncState.lastCancelOwed = false
            // Outside the caller's cancellation: the controller must stop looking before
            // the next Create Sync goes out.
            let controller = self.controller
            if (try? await Task { try await controller.send(LEPeriodicAdvertisingCreateSyncCancel()) }.value) != nil {
                syncState.cancelsOwed += 1
            }
        }
        await endScan(scan)
        withExtendedLifetime(results) {}
        return try result.get()
    }

    /// Whether a sync of this host follows `a`'s train.
    func isFollowing(_ a: PeriodicAdvertiser) -> Bool {
        syncState.syncs.values.contains {
            $0.sync.advertiser == a.address && $0.sync.sid == a.sid && $0.sync.advertiserAddressType.rawValue & 1 == a.addressType.rawValue & 1
        }
    }

    /// Makes the controller's Periodic Advertiser List hold exactly `targets` (in the
    /// sync slot, so no Create Sync is pending: the list may change).
    func fillPeriodicAdvertiserList(_ targets: [PeriodicAdvertiser]) async throws {
        try await fillControllerList("Periodic Advertiser List", known: syncState.advertiserListSize, remember: { syncState.advertiserListSize = $0 },
                                     readSize: LEReadPeriodicAdvertiserListSize(), clear: LEClearPeriodicAdvertiserList(), adds: targets.map {
                                         LEAddDeviceToPeriodicAdvertiserList(advertiserAddressType: Self.advertiserAddressType($0.addressType),
                                                                             advertiserAddress: $0.address, advertisingSID: $0.sid)
                                     })
    }

    /// Ends the sync being created with `error`; with `cancel`, the controller is told
    /// to stop looking (by `synchronize`, before its slot goes to the next).
    func abandonSync(_ error: any Error, cancel: Bool = true) {
        guard let w = syncState.waiter else { return }
        syncState.waiter = nil
        w.timer.cancel()
        syncState.lastCancelOwed = cancel
        w.continuation.resume(throwing: error)
    }

    func acquireSyncSlot() async {
        if !syncState.busy {
            syncState.busy = true
            return
        }
        await withCheckedContinuation { syncState.queue.append($0) }
    }

    func releaseSyncSlot() {
        if syncState.queue.isEmpty { syncState.busy = false } else { syncState.queue.removeFirst().resume() }
    }

    /// LE Periodic Advertising Sync Established.
    func syncEstablished(_ e: LEPeriodicAdvertisingSyncEstablished) {
        guard e.status.isSuccess else {
            if e.status == .operationCancelledByHost, syncState.cancelsOwed > 0 {
                syncState.cancelsOwed -= 1
                return
            }
            guard let w = syncState.waiter else { return }
            syncState.waiter = nil
            w.timer.cancel()
            w.continuation.resume(throwing: BLEError.periodicSyncFailed(w.advertisers, e.status))
            return
        }
        // A train waited for: its SID, and its address, unless the controller resolved
        // the private address the wait named to an identity (address type 2 or 3).
        guard let w = syncState.waiter, w.advertisers.contains(where: {
            e.advertisingSID == $0.sid && (e.advertiserAddress == $0.address || e.advertiserAddressType.rawValue & 0x02 != 0)
        }) else {
            // A sync nobody waits for any more (its wait ended as the controller found
            // the train, so the cancel came too late): let it go.
            let controller = self.controller, handle = e.syncHandle
            logger.debug("periodic advertising sync nobody waits for; terminating it", metadata: ["ble.syncHandle": "\(handle)"])
            owe { _ = try? await controller.send(LEPeriodicAdvertisingTerminateSync(syncHandle: handle)) }
            return
        }
        syncState.waiter = nil
        w.timer.cancel()
        let (stream, continuation) = BufferedThrowingStream<PeriodicAdvertisement>.makeStream(capacity: w.capacity)
        let sync = PeriodicAdvertisingSync(handle: e.syncHandle, advertiser: e.advertiserAddress, advertiserAddressType: e.advertiserAddressType,
                                           sid: e.advertisingSID, interval: .microseconds(1250 * Int(e.periodicAdvertisingInterval)),
                                           advertisements: stream, host: self)
        syncState.syncs[e.syncHandle] = SyncSubscriber(sync: sync, continuation: continuation)
        // The consumer let go: the sync ends before the program's next operation goes out.
        let handle = e.syncHandle
        continuation.onTermination = { [weak self] _ in
            guard let host = self else { return }
            host.owe { try? await host.terminateSync(handle) }
        }
        logger.debug("periodic advertising sync established", metadata: ["ble.syncHandle": "\(handle)", "ble.peer": "\(e.advertiserAddress)"])
        w.continuation.resume(returning: sync)
    }

    /// LE Periodic Advertising Report: a packet's data, or a piece of it.
    func periodicReport(_ r: LEPeriodicAdvertisingReport) {
        guard var s = syncState.syncs[r.syncHandle] else { return }
        s.partial += r.data
        // Never more than a train carries: an endless "more to come" is cut there.
        let limit = LESetExtendedAdvertisingParameters.hostAdvertisingDataLimit
        if r.dataStatus == 1, s.partial.count <= limit {
            syncState.syncs[r.syncHandle] = s
            return
        }
        let raw = Array(s.partial.prefix(limit))
        let truncated = r.dataStatus != 0 || s.partial.count > limit
        s.partial = []
        syncState.syncs[r.syncHandle] = s
        _ = s.continuation.yield(PeriodicAdvertisement(data: AdvertisingData(parsing: raw), raw: raw, rssi: r.rssi == 127 ? nil : r.rssi,
                                                       txPower: r.txPower == 127 ? nil : r.txPower, isTruncated: truncated))
    }

    /// LE Periodic Advertising Sync Lost.
    func syncLost(_ handle: UInt16) {
        guard let s = syncState.syncs.removeValue(forKey: handle) else { return }
        logger.debug("periodic advertising sync lost", metadata: ["ble.syncHandle": "\(handle)"])
        s.continuation.finish(throwing: BLEError.periodicSyncLost(s.sync.source))
    }

    /// Ends sync `handle` from this side (LE Periodic Advertising Terminate Sync).
    func terminateSync(_ handle: UInt16) async throws {
        guard let s = syncState.syncs.removeValue(forKey: handle) else { return }
        s.continuation.finish()
        guard state == .ready else { return }
        do {
            try await controller.send(LEPeriodicAdvertisingTerminateSync(syncHandle: handle))
        } catch HCIError.commandFailed(_, .unknownAdvertisingIdentifier) {
            // Lost meanwhile: its Sync Lost is on its way.
        }
    }

    /// Every sync ends: the transport closed (`closed`, its reason), or the controller
    /// is being reset (nil: each sync is lost, the sync being created fails).
    func endSyncs(closed reason: String?) {
        for h in syncState.syncs.keys.sorted() {
            guard let s = syncState.syncs.removeValue(forKey: h) else { continue }
            s.continuation.finish(throwing: reason.map(BLEError.transportClosed) ?? BLEError.periodicSyncLost(s.sync.source))
        }
        abandonSync(reason.map(BLEError.transportClosed) ?? BLEError.notReady(.resetting), cancel: false)
        syncState.cancelsOwed = 0
    }
}
