// Advertising, the peripheral role's way to be found (FA05): `startAdvertising`'s
// advertisement (set 0) and the advertising sets beside it (extended commands only),
// each with its limits (a duration, a maximum number of advertising events). The host
// keeps what each set advertises, restarts it when a link it made ends, a private
// address changes or the controller is reset, and reports a set a limit ended.

import GAP
import HCI

/// An advertising set beside `startAdvertising`'s (`PeripheralManager.addAdvertisingSet`):
/// the controller advertises each set with its own data, interval and connectability
/// and, under privacy, from its own resolvable private address.
public struct AdvertisingSet: Hashable, Sendable, CustomStringConvertible {
    /// The controller's Advertising_Handle (1 or more; `startAdvertising` uses 0).
    public let handle: UInt8
    public var description: String { "advertising set \(handle)" }
}

/// Whom an advertisement answers only if they are on the accept list
/// (`BluetoothHost.setAcceptList`): the Advertising_Filter_Policy of §7.8.5 and
/// §7.8.53, as Zephyr's `BT_LE_ADV_OPT_FILTER_CONN` and NimBLE's `filter_policy` give
/// it. Empty: everyone.
public struct AdvertisingFilter: OptionSet, Hashable, Sendable {
    public let rawValue: UInt8
    public init(rawValue: UInt8) { self.rawValue = rawValue }
    /// Only devices on the accept list get the scan response.
    public static let scanRequests = AdvertisingFilter(rawValue: 0x01)
    /// Only devices on the accept list may connect (a peripheral that serves its bonded
    /// centrals alone).
    public static let connections = AdvertisingFilter(rawValue: 0x02)
}

/// The PHYs an advertisement goes out on: its primary advertising channel PDUs and
/// the auxiliary PDUs that carry its data (Primary_Advertising_PHY and
/// Secondary_Advertising_PHY of §7.8.53), as Bumble's `AdvertisingParameters` and
/// Android's `AdvertisingSetParameters` name them. A primary PHY other than LE 1M
/// needs extended PDUs, which only extended scanners on that PHY hear; a link the
/// advertisement makes starts on its secondary PHY.
public struct AdvertisingPHYs: Hashable, Sendable, CustomStringConvertible {
    /// LE 1M or LE Coded.
    public var primary: PHY
    /// LE 1M, LE 2M or LE Coded.
    public var secondary: PHY
    public init(primary: PHY = .le1M, secondary: PHY = .le1M) {
        self.primary = primary
        self.secondary = secondary
    }
    /// LE 1M: legacy PDUs while the data fits them, heard by every scanner.
    public static let le1M = AdvertisingPHYs()
    /// LE Coded both ways: long range (S=8, about four times LE 1M's reach), heard by
    /// scanners that scan LE Coded (`Central.scan(phys:)`).
    public static let longRange = AdvertisingPHYs(primary: .leCoded, secondary: .leCoded)

    public var description: String { primary == secondary ? "\(primary)" : "\(primary), data on \(secondary)" }
}

struct AdvertisingConfiguration: Sendable, Equatable {
    var data: AdvertisingData
    var scanResponse: AdvertisingData?
    var connectable: Bool
    var intervalMilliseconds: Double
    /// Who must be on the accept list to scan it or connect.
    var filter: AdvertisingFilter = []
    /// How long the advertisement lasts from the application's start (nil: until stopped).
    var duration: Duration? = nil
    /// How many advertising events each enabling of the set sends at most (nil: no limit).
    var maximumEvents: Int? = nil
    /// The set's periodic advertising (PeriodicAdvertising.swift): its PDUs are then extended ones.
    var periodic: PeriodicConfiguration? = nil
    var phys = AdvertisingPHYs.le1M
    /// The one device it is for (directed advertising), nil: everyone.
    var directed: DirectedTarget? = nil

    /// Whether it goes out as extended PDUs whatever its length: with periodic
    /// advertising, off LE 1M, or directed with data (ADV_DIRECT_IND carries none).
    var needsExtendedPDUs: Bool { periodic != nil || phys != .le1M || (directed != nil && !data.bytes.isEmpty) }

    /// The longest a high duty cycle directed advertisement lasts (§7.8.56: Duration
    /// 1 to 128 units of 10 ms; a legacy controller ends it itself after 1.28 s).
    static let highDutyCycleLimit = Duration.milliseconds(1_280)
    /// The PHYs as LE Set Extended Advertising Parameters takes them.
    var phyValues: (primary: UInt8, secondary: UInt8) { (phys.primary.rawValue, phys.secondary.rawValue) }

    /// The longest Duration LE Set Extended Advertising Enable takes: 0xFFFF × 10 ms.
    static let longestDuration = Duration.milliseconds(655_350)

    /// Checks the limits: a duration of 10 ms to 655.35 s (the controller counts in
    /// 10 ms units; the host keeps a legacy controller's to the same range), 1 to 255
    /// events, and events only where the controller counts them (the extended commands).
    func validate(extendedCommands: Bool) throws {
        guard phys.primary == .le1M || phys.primary == .leCoded, phys.secondary.isKnown else {
            throw BLEError.invalidArgument("an advertisement's primary PHY is LE 1M or LE Coded and its secondary LE 1M, LE 2M or LE Coded, not \(phys)")
        }
        if phys != .le1M, !extendedCommands {
            throw BLEError.notSupported("advertising on \(phys) needs a controller driven with the extended commands (usesExtendedCommands)")
        }
        if let d = duration, d < .milliseconds(10) || d > Self.longestDuration {
            throw BLEError.invalidArgument("an advertising duration is 10 ms to 655.35 s, not \(d)")
        }
        if let d = directed { try validate(directed: d, extendedCommands: extendedCommands) }
        if let m = maximumEvents {
            guard (1...255).contains(m) else { throw BLEError.invalidArgument("maximumEvents is 1 to 255, not \(m)") }
            guard extendedCommands else {
                throw BLEError.notSupported("a maximum number of advertising events needs a controller driven with the extended commands (usesExtendedCommands)")
            }
        }
    }
}

extension AdvertisingConfiguration {
    /// Directed advertising is connectable, for one device, with no scan response;
    /// without data it goes out as ADV_DIRECT_IND, with data (extended commands only)
    /// as extended PDUs; high duty cycle only as ADV_DIRECT_IND, for 1.28 s at most.
    func validate(directed d: DirectedTarget, extendedCommands: Bool) throws {
        guard connectable else { throw BLEError.invalidArgument("directed advertising is connectable: it asks one device to connect") }
        guard scanResponse == nil else { throw BLEError.invalidArgument("directed advertising takes no scan response") }
        if d.highDutyCycle {
            guard data.bytes.isEmpty, phys == .le1M, periodic == nil else {
                throw BLEError.invalidArgument("high duty cycle directed advertising goes out as ADV_DIRECT_IND on LE 1M, which carries no data")
            }
            if let duration, duration > Self.highDutyCycleLimit {
                throw BLEError.invalidArgument("high duty cycle directed advertising lasts 1.28 s at most, not \(duration)")
            }
        } else if !data.bytes.isEmpty, !extendedCommands {
            throw BLEError.notSupported("directed advertising with data needs a controller driven with the extended commands (usesExtendedCommands): ADV_DIRECT_IND carries none")
        }
    }
}

extension DirectedTarget {
    /// Directed advertising to `peer` (its address as a scan or a bond gives it).
    public init(_ peer: DeviceAddress, highDutyCycle: Bool = false) {
        self.init(address: peer.address, addressType: AddressType(rawValue: peer.type.rawValue & 1), highDutyCycle: highDutyCycle)
    }
}

/// Why an advertisement ended by itself (`PeripheralEvent.advertisingEnded`).
public enum AdvertisingEndReason: Hashable, Sendable {
    /// Its `duration` elapsed (LE Advertising Set Terminated with Advertising Timeout,
    /// or the host's own timer on a controller driven with the legacy commands).
    case durationElapsed
    /// It sent its `maximumEvents` advertising events (Limit Reached); `events` is the
    /// controller's count.
    case eventLimitReached(events: Int)
    /// The controller ended it for another reason (LE Advertising Set Terminated's status).
    case controller(HCIStatus)
}

extension PeripheralManager {
    // MARK: FA05

    /// Starts advertising (and resumes it after each central connects or leaves, until
    /// `stopAdvertising`). Legacy PDUs carry 31 bytes each of advertisement and scan
    /// response; a controller with extended advertising (`usesExtendedCommands`) takes
    /// more, as extended PDUs (the scan response then joins the advertisement; only
    /// extended scanners hear it). Throws `AdvertisingDataError.tooLong` saying how much fits.
    ///
    /// Limits, as BlueZ's advertising Timeout, Android's advertising sets and Bumble's
    /// `start(duration:max_advertising_events:)` have them (`BLEError.invalidArgument`
    /// outside their ranges):
    /// - `duration` (10 ms to 655.35 s): the advertisement's lifetime from this call,
    ///   kept by the controller (Duration of LE Set Extended Advertising Enable) or, on a
    ///   controller driven with the legacy commands, by the host. Restarts by the host
    ///   (a new private address, after a link it made) take only what is left of it.
    /// - `maximumEvents` (1 to 255; the extended commands only, else
    ///   `BLEError.notSupported`): the controller stops after that many advertising
    ///   events. The count starts again when the host restarts the set after a link it
    ///   made or around a resolving-list update; a new private address does not restart
    ///   it (the set keeps its address until it ends).
    ///
    /// When a limit ends it, `events()` delivers `.advertisingEnded` and the
    /// advertisement stays off air until started again.
    ///
    /// `acceptListOnly` answers only the devices on the accept list
    /// (`BluetoothHost.setAcceptList`): `.connections` lets only them connect,
    /// `.scanRequests` gives only them the scan response. The controller's Filter Accept
    /// List holds that list while such an advertisement is on (or waits for a link it
    /// made to end); `BLEError.acceptListInUse` when a connection attempt is under way
    /// and the controller's list must change first.
    ///
    /// `phys` other than `.le1M` (`.longRange`: LE Coded, for range) needs the extended
    /// commands (else `BLEError.notSupported`); the advertisement then goes out as
    /// extended PDUs, heard only by extended scanners on its primary PHY, and a
    /// connectable one takes the scan response into the advertisement. A controller
    /// without the PHY refuses it (Unsupported Feature or Parameter Value).
    ///
    /// `directedTo` advertises to one device alone (connectable directed advertising,
    /// as Bumble's `target` and NimBLE's `direct_addr` give it): only that device hears
    /// it and only it may connect, e.g. a bonded central the peripheral wants back.
    /// Without data it goes out as ADV_DIRECT_IND, which carries none, to every
    /// scanner type; with data (the extended commands only) as extended PDUs. High duty
    /// cycle (`DirectedTarget.highDutyCycle`, for the fastest reconnection) lasts
    /// 1.28 s at most and carries no data: when no connection comes, `events()`
    /// delivers `.advertisingEnded(_, .durationElapsed)`. No scan response, and
    /// `connectable` stays true (`BLEError.invalidArgument` otherwise).
    public func startAdvertising(_ data: AdvertisingData, scanResponse: AdvertisingData? = nil,
                                 connectable: Bool = true, intervalMilliseconds: Double = 100,
                                 duration: Duration? = nil, maximumEvents: Int? = nil, acceptListOnly: AdvertisingFilter = [],
                                 phys: AdvertisingPHYs = .le1M, directedTo: DirectedTarget? = nil) async throws {
        try await host.setAdvertising(AdvertisingConfiguration(data: data, scanResponse: scanResponse, connectable: connectable,
                                                               intervalMilliseconds: intervalMilliseconds, filter: acceptListOnly,
                                                               duration: duration, maximumEvents: maximumEvents, phys: phys,
                                                               directed: directedTo), set: 0)
    }

    public func stopAdvertising() async throws { try await host.setAdvertising(nil, set: 0) }

    // MARK: More advertising sets

    /// How many advertisements the controller can send at once: its advertising sets
    /// (LE Read Number of Supported Advertising Sets), `startAdvertising`'s included;
    /// 1 without the extended commands. Known once the host has started.
    public var maximumAdvertisingSets: Int { get async { await host.maximumAdvertisingSets } }

    /// Advertises `data` in an advertising set of its own, beside `startAdvertising`'s
    /// and the other sets (a beacon next to a connectable advertisement, one
    /// advertisement per profile, as BlueZ's advertising instances and Android's
    /// advertising sets do). Each set has its own data (the limits of
    /// `startAdvertising`), interval and connectability, and under privacy its own
    /// resolvable private address, renewed with the others every rotation. A
    /// connectable set stops when a central connects to it and resumes when that link
    /// ends. Needs a controller driven with the extended commands
    /// (`usesExtendedCommands`; else `BLEError.notSupported`); throws
    /// `BLEError.noAdvertisingSetFree` when every set is taken, and
    /// `AdvertisingDataError.tooLong` as `startAdvertising` does. `duration` and
    /// `maximumEvents` limit the set as they limit `startAdvertising`'s; a set they
    /// ended keeps its handle until removed, and `updateAdvertisingSet` starts it again.
    /// `acceptListOnly`, `phys` and `directedTo` as `startAdvertising` takes them (a
    /// long-range set beside an LE 1M advertisement reaches both kinds of scanner; a
    /// directed set is connectable, so give `connectable: true`).
    public func addAdvertisingSet(_ data: AdvertisingData, scanResponse: AdvertisingData? = nil,
                                  connectable: Bool = false, intervalMilliseconds: Double = 100,
                                  duration: Duration? = nil, maximumEvents: Int? = nil, acceptListOnly: AdvertisingFilter = [],
                                  phys: AdvertisingPHYs = .le1M, directedTo: DirectedTarget? = nil) async throws -> AdvertisingSet {
        try await host.addAdvertisingSet(AdvertisingConfiguration(data: data, scanResponse: scanResponse, connectable: connectable,
                                                                  intervalMilliseconds: intervalMilliseconds, filter: acceptListOnly,
                                                                  duration: duration, maximumEvents: maximumEvents, phys: phys,
                                                                  directed: directedTo))
    }

    /// Replaces what a set advertises (the set restarts with it, keeping its address,
    /// and its limits count from now). A connectable set stopped for a link it made
    /// stays stopped and takes the new data when it resumes, at that link's end.
    public func updateAdvertisingSet(_ set: AdvertisingSet, data: AdvertisingData, scanResponse: AdvertisingData? = nil,
                                     connectable: Bool = false, intervalMilliseconds: Double = 100,
                                     duration: Duration? = nil, maximumEvents: Int? = nil, acceptListOnly: AdvertisingFilter = [],
                                     phys: AdvertisingPHYs = .le1M, directedTo: DirectedTarget? = nil) async throws {
        try await host.requireAdvertisingSet(set)
        var a = AdvertisingConfiguration(data: data, scanResponse: scanResponse, connectable: connectable,
                                         intervalMilliseconds: intervalMilliseconds, filter: acceptListOnly, duration: duration, maximumEvents: maximumEvents,
                                         phys: phys, directed: directedTo)
        // Its periodic advertising goes on, and needs a set neither connectable nor scannable.
        a.periodic = await host.peripheralState.advertising[set.handle]?.periodic
        if a.periodic != nil, connectable || scanResponse != nil {
            throw BLEError.invalidArgument("\(set) has periodic advertising: it can be neither connectable nor scannable (stopPeriodicAdvertising first)")
        }
        try await host.setAdvertising(a, set: set.handle)
    }

    /// Stops a set and has the controller forget it (LE Remove Advertising Set); its
    /// handle may serve a later set. A link it made stays up.
    public func removeAdvertisingSet(_ set: AdvertisingSet) async throws {
        try await host.requireAdvertisingSet(set)
        try await host.setAdvertising(nil, set: set.handle)
    }

    /// The sets added and not removed, by handle.
    public var advertisingSets: [AdvertisingSet] {
        get async { await host.peripheralState.advertising.keys.filter { $0 != 0 }.sorted().map(AdvertisingSet.init) }
    }
}

extension BluetoothHost {
    /// Advertises `a` in set `set`, or stops it (nil).
    func setAdvertising(_ a: AdvertisingConfiguration?, set: UInt8) async throws {
        try requireReady()
        try a?.validate(extendedCommands: usesExtendedCommands)
        // Recorded before the commands go out: a central may connect as soon as the
        // controller has answered the enable, and the event follower may handle that
        // connection before this task resumes; whether advertising resumes for it must
        // follow the HCI conversation, not which task ran first.
        let previous = (peripheralState.advertising[set], peripheralState.advertisingDeadlines[set], peripheralState.advertisingEnded.contains(set))
        peripheralState.advertising[set] = a
        peripheralState.advertisingDeadlines[set] = a?.duration.map { now + $0 }
        peripheralState.advertisingEnded.remove(set)
        // An end of the advertisement on air now, arriving during this change (before its
        // enable is answered), is the replaced advertisement's.
        let marks = usesExtendedCommands && a != nil ? beginReplacing(set) : nil
        defer { endReplacing(marks) }
        do {
            try await withAdvertisingLock {
                guard let a else { return try await stopAdvertisingNow(set: set) }
                // A set stopped for a link it made takes what it is given when it resumes,
                // at that link's end (re-enabled while the link is up, Rootcanal 1.10 never
                // connects to it again); the data is checked now.
                guard usesExtendedCommands, peripheralState.advertisingLinks[set] != nil else { return try await startAdvertisingNow(a, set: set) }
                _ = try Advertiser.extendedPDUs(data: a.data, scanResponse: a.scanResponse, connectable: a.connectable,
                                                maximumLength: info?.maximumAdvertisingDataLength ?? 31, extended: a.needsExtendedPDUs,
                                                directed: a.directed)
            }
        } catch {
            peripheralState.advertising[set] = previous.0
            peripheralState.advertisingDeadlines[set] = previous.1
            if previous.2 { peripheralState.advertisingEnded.insert(set) }
            throw error
        }
    }

    /// LE Set Extended Advertising Enable's entry for set `set` as it starts now: what
    /// is left of its duration, its event limit. nil when its duration is over.
    func advertisingEnable(_ set: UInt8, _ a: AdvertisingConfiguration) -> LESetExtendedAdvertisingEnable.AdvertisingSet? {
        var e = LESetExtendedAdvertisingEnable.AdvertisingSet(advertisingHandle: set, maxExtendedAdvertisingEvents: UInt8(a.maximumEvents ?? 0))
        if let deadline = peripheralState.advertisingDeadlines[set] {
            // In whole 10 ms units, rounded down: the set never outlives its deadline.
            let units = (deadline - now) / .milliseconds(10)
            guard units >= 1 else { return nil }
            e.duration = UInt16(min(units, Double(UInt16.max)))
        }
        // High duty cycle directed advertising takes a Duration of 1.28 s at most (§7.8.56).
        let highDutyCycleUnits = UInt16(AdvertisingConfiguration.highDutyCycleLimit / .milliseconds(10))
        if a.directed?.highDutyCycle == true, e.duration == 0 || e.duration > highDutyCycleUnits { e.duration = highDutyCycleUnits }
        return e
    }

    /// A limit ended set `set` (once: later reports of the same end change nothing).
    func advertisingEnded(_ set: UInt8, _ reason: AdvertisingEndReason) {
        guard peripheralState.advertising[set] != nil, peripheralState.advertisingEnded.insert(set).inserted else { return }
        if set == 0 {
            peripheralState.cancelLegacyAdvertisingTimer()
        }
        logger.debug("advertising ended", metadata: ["ble.advertisingSet": "\(set)", "reason": "\(reason)"])
        peripheralBroadcast.yield(.advertisingEnded(AdvertisingSet(handle: set), reason: reason))
    }

    /// LE Advertising Set Terminated with success: a central connected to the set, and
    /// the controller stopped it until the link ends. The link's connection reaches the
    /// host on its own stream: if it has not yet, the set is announced when it does.
    /// Taken as it arrives, so the link holds the set's enabling on air now (an enable
    /// answered after it clears the hold: `advertisingEnableAnswered`). Returns the
    /// set's restart when its link is gone already.
    func advertisingSetConnected(_ t: LEAdvertisingSetTerminated) -> (@Sendable () async -> Void)? {
        let set = t.advertisingHandle, handle = t.connectionHandle
        guard peripheralState.advertising[set] != nil else { return nil }
        if let conn = links.active[handle] {
            peripheralState.advertisingLinks[set] = handle
            peripheralBroadcast.yield(.advertisingConnected(AdvertisingSet(handle: set), central: conn))
        } else if l2cap.loop.inEventLoop, l2cap.onLoop({ $0.hasLink(handle: handle) }) {
            peripheralState.advertisingLinks[set] = handle
            peripheralState.linksAwaitingSet[handle] = set
        } else {
            // The link came and went before this event came: nothing holds the set off
            // air any more, so it starts again.
            logger.debug("advertising set's link already ended", metadata: ["ble.advertisingSet": "\(set)", "ble.handle": "\(handle)"])
            return { [weak self] in await self?.restartAdvertising([set], "advertising did not resume") }
        }
        return nil
    }

    /// Starts each of `sets` again, one change at a time (`withAdvertisingLock`), with
    /// what the application asks for by then: a set removed meanwhile, held by a link
    /// made meanwhile, or ended by a limit is left off air. A failure is logged with
    /// `what`, and the next set goes on. A rotation's restart (`generation`, the period
    /// it is for) is left to the next period's once that has begun.
    func restartAdvertising(_ sets: [UInt8], _ what: String, forPeriod generation: Int? = nil) async {
        for s in sets where peripheralState.advertising[s] != nil {
            do {
                try await withAdvertisingLock {
                    // A rotation's restart that waited its turn past the next period's start
                    // is that period's to make: made here too, it would put the new
                    // address on air twice.
                    if let generation, generation != own.generation { return }
                    if let a = peripheralState.advertising[s], state == .ready, peripheralState.advertisingLinks[s] == nil {
                        try await startAdvertisingNow(a, set: s)
                    }
                }
            } catch {
                logger.warning("\(what)", metadata: ["error": "\(error)", "ble.advertisingSet": "\(s)"])
            }
        }
    }

    /// An LE Set Extended Advertising Enable of the host's answered (`answered`, as the
    /// answer arrives): each set it enabled has a new enabling, and a link made to the
    /// set's earlier one holds it no more (its end starts nothing again).
    func advertisingEnableAnswered(_ command: CommandFlow.Entry, _ outcome: CommandFlow.Outcome) {
        guard case let .complete(r) = outcome, r.first == 0 else { return }
        var reader = ByteReader(command.parameters, context: "LE Set Extended Advertising Enable")
        guard let enable = try? LESetExtendedAdvertisingEnable(parameters: &reader), enable.enable else { return }
        for s in enable.sets {
            peripheralState.enablings[s.advertisingHandle, default: 0] += 1
            if let link = peripheralState.advertisingLinks.removeValue(forKey: s.advertisingHandle) {
                peripheralState.linksHoldingNothing.insert(link)
            }
        }
    }

    /// Marks a change of `set` as under way (`PeripheralState.replacing`); undone by
    /// `endReplacing` with what this returns.
    func beginReplacing(_ set: UInt8) -> (set: UInt8, enabling: Int) {
        let enabling = peripheralState.enablings[set] ?? 0
        peripheralState.replacing[set, default: []].append(enabling)
        return (set, enabling)
    }

    func endReplacing(_ mark: (set: UInt8, enabling: Int)?) {
        guard let mark, var marks = peripheralState.replacing[mark.set], let i = marks.firstIndex(of: mark.enabling) else { return }
        marks.remove(at: i)
        peripheralState.replacing[mark.set] = marks.isEmpty ? nil : marks
    }

    /// Whether an end of `set`'s enabling, arriving now, is of an advertisement being
    /// replaced: a change of the set began while this enabling was the set's, and no
    /// enable of the set has been answered since.
    func endsReplacedEnabling(_ set: UInt8) -> Bool {
        guard let latest = peripheralState.replacing[set]?.max() else { return false }
        return peripheralState.enablings[set] ?? 0 <= latest
    }

    /// LE Advertising Set Terminated without a connection, for a set the host advertises.
    func advertisingSetTerminated(_ t: LEAdvertisingSetTerminated) {
        guard let a = peripheralState.advertising[t.advertisingHandle] else { return }
        let events = Int(t.numCompletedExtendedAdvertisingEvents)
        let reason: AdvertisingEndReason
        switch t.status {
        case .limitReached:
            reason = .eventLimitReached(events: events)
        case .advertisingTimeout:
            // Rootcanal 1.10 reports an event limit with Advertising Timeout too: the
            // configuration says which limit it was.
            if let m = a.maximumEvents, a.duration == nil || events >= m { reason = .eventLimitReached(events: events) } else { reason = .durationElapsed }
        default:
            reason = .controller(t.status)
        }
        advertisingEnded(t.advertisingHandle, reason)
    }

    /// An LE Connection Complete with Advertising Timeout: high duty cycle directed
    /// advertising made no link in its 1.28 s (§7.8.9). With the legacy commands that
    /// is the end of set 0's advertisement; with the extended ones the set's LE
    /// Advertising Set Terminated says so, and this event adds nothing.
    func directedAdvertisingTimedOut() {
        guard !usesExtendedCommands, peripheralState.advertising[0]?.directed?.highDutyCycle == true else { return }
        advertisingEnded(0, .durationElapsed)
    }

    /// The host's timer for a legacy controller's advertising duration went off.
    func legacyAdvertisingDurationElapsed() async {
        do {
            try await withAdvertisingLock {
                guard peripheralState.advertising[0] != nil, !peripheralState.advertisingEnded.contains(0),
                      let deadline = peripheralState.advertisingDeadlines[0], now >= deadline, state == .ready else { return }
                try await Advertiser.stop(controller)
                advertisingEnded(0, .durationElapsed)
            }
        } catch {
            logger.warning("advertising did not stop at the end of its duration", metadata: ["error": "\(error)"])
        }
    }

    var maximumAdvertisingSets: Int {
        // Advertising handles go up to 0xEF (§7.8.53).
        usesExtendedCommands ? min(max(info?.numberOfSupportedAdvertisingSets ?? 1, 1), 0xF0) : 1
    }

    /// A new set on the lowest free handle above 0.
    func addAdvertisingSet(_ a: AdvertisingConfiguration) async throws -> AdvertisingSet {
        try requireReady()
        guard usesExtendedCommands else {
            throw BLEError.notSupported("more advertising sets need a controller with extended advertising, driven with the extended commands (usesExtendedCommands)")
        }
        // Set 0 is `startAdvertising`'s whether it advertises now or not.
        guard let handle = (1..<UInt8(maximumAdvertisingSets)).first(where: { peripheralState.advertising[$0] == nil }) else {
            throw BLEError.noAdvertisingSetFree(maximum: maximumAdvertisingSets)
        }
        try await setAdvertising(a, set: handle)
        return AdvertisingSet(handle: handle)
    }

    func requireAdvertisingSet(_ set: AdvertisingSet) throws {
        guard set.handle != 0, peripheralState.advertising[set.handle] != nil else { throw BLEError.unknownAdvertisingSet(set.handle) }
    }

    /// Runs one change of the controller's advertising after the one under way: the
    /// commands of two changes interleaved (a resumption after a disconnection racing
    /// the application's own start) would make the controller refuse the second's
    /// parameters while the first has enabled advertising (Command Disallowed). Each
    /// change's commands have their own timeouts, so the wait ends.
    func withAdvertisingLock(_ body: () async throws -> Void) async throws {
        while !peripheralState.advertisingTurn.enter() { await withCheckedContinuation { peripheralState.advertisingTurn.wait($0) } }
        defer { peripheralState.advertisingTurn.leave() }
        try await body()
    }

    /// Starts (or restarts) advertising `a` in set `set`; under privacy from the set's
    /// current private address.
    func startAdvertisingNow(_ a: AdvertisingConfiguration, set: UInt8) async throws {
        // A set a limit ended stays off air until the application starts it again.
        guard !peripheralState.advertisingEnded.contains(set) else { return }
        guard let enable = advertisingEnable(set, a) else { return advertisingEnded(set, .durationElapsed) }
        if !a.filter.isEmpty { try await holdAcceptList() }
        if own.resolvingList?.stale == true {
            // New bonds wait for the controller to stop every set (§7.8.38); the other
            // sets advertising go on after.
            if usesExtendedCommands {
                _ = try? await Advertiser.stopExtended(controller, handles: [])
            } else {
                _ = try? await Advertiser.stop(controller)
            }
            await syncResolvingList(advertisingStopped: true)
            if usesExtendedCommands {
                let others = peripheralState.setsOnAir.filter { $0 != set }
                var resumed: [LESetExtendedAdvertisingEnable.AdvertisingSet] = []
                for s in others {
                    guard let o = peripheralState.advertising[s] else { continue }
                    if let e = advertisingEnable(s, o) { resumed.append(e) } else { advertisingEnded(s, .durationElapsed) }
                }
                do { try await Advertiser.resumeExtended(controller, sets: resumed) } catch {
                    logger.warning("advertising sets did not resume", metadata: ["error": "\(error)", "ble.advertisingSets": "\(others)"])
                }
            }
        }
        if usesExtendedCommands {
            // An end of the enabling this replaces (a rotation's, a restart's), arriving
            // before the new one's enable is answered, changes nothing: the set goes on
            // with what is left of its duration.
            let mark = beginReplacing(set)
            defer { endReplacing(mark) }
            let address = advertisingSetAddress(set)
            // (A link that held the set holds it no more once the controller has answered
            // the enable: `advertisingEnableAnswered` clears it then, in the controller's order, so
            // a central that connects to the new advertisement before this task resumes
            // still holds it.)
            try await Advertiser.startExtended(controller, data: a.data, scanResponse: a.scanResponse, connectable: a.connectable,
                                               intervalMilliseconds: a.intervalMilliseconds, maximumLength: info?.maximumAdvertisingDataLength ?? 31,
                                               randomAddress: address, handle: set,
                                               duration: enable.duration, maximumEvents: enable.maxExtendedAdvertisingEvents,
                                               extended: a.needsExtendedPDUs, filterPolicy: a.filter.rawValue, phys: a.phyValues,
                                               directed: a.directed)
            try await applyPeriodic(a.periodic, set: set)
            if let address { advertisingSetAddressSet(address, set: set) }
        } else {
            let generation = own.generation, address = legacyAdvertisingAddress()
            try await Advertiser.start(controller, data: a.data, scanResponse: a.scanResponse, connectable: a.connectable,
                                       intervalMilliseconds: a.intervalMilliseconds, ownAddressType: ownAddressType, randomAddress: address,
                                       filterPolicy: a.filter.rawValue, directed: a.directed)
            if let address { controllerAddressSet(address, generation: generation) }
            // The controller keeps no duration for legacy advertising: the host does.
            peripheralState.cancelLegacyAdvertisingTimer()
            if let deadline = peripheralState.advertisingDeadlines[0] {
                peripheralState.legacyAdvertisingTimer = LoopTimer(after: max(.zero, deadline - now), on: loop) { [weak self] in
                    guard let self else { return }
                    Task { await self.legacyAdvertisingDurationElapsed() }
                }
            }
        }
    }

    /// Sets set `set` up on the controller as `startAdvertisingNow` does, without
    /// enabling it (extended commands).
    func configureAdvertisingOffAir(_ a: AdvertisingConfiguration, set: UInt8) async throws {
        let address = advertisingSetAddress(set)
        try await Advertiser.configureExtended(controller, data: a.data, scanResponse: a.scanResponse, connectable: a.connectable,
                                               intervalMilliseconds: a.intervalMilliseconds, maximumLength: info?.maximumAdvertisingDataLength ?? 31,
                                               randomAddress: address, handle: set, extended: a.needsExtendedPDUs, filterPolicy: a.filter.rawValue,
                                               phys: a.phyValues, directed: a.directed)
        if let address { advertisingSetAddressSet(address, set: set) }
    }

    /// Stops set `set`; a set other than 0 is removed from the controller too.
    func stopAdvertisingNow(set: UInt8) async throws {
        guard usesExtendedCommands else {
            peripheralState.cancelLegacyAdvertisingTimer()
            return try await Advertiser.stop(controller)
        }
        if set == 0 { return try await Advertiser.stopExtended(controller) }
        // A set's periodic advertising stops before it goes (§7.8.59).
        if peripheralState.periodicOnAir[set] != nil { try await applyPeriodic(nil, set: set) }
        try await Advertiser.removeExtended(controller, handle: set)
        peripheralState.advertisingLinks[set] = nil
        security.onLoop { $0.setOwnAddress(nil, advertisingSet: set) }
    }
}
