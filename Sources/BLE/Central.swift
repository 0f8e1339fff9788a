// The central role of the facade: scanning (FA02), known and connected peripherals
// (FA03), connecting (FA04). A connected peripheral is a `RemotePeripheral`.

import GAP
import NIOCore
import GATT
import HCI

/// One advertising report, with the device as it stands after it (advertisement and
/// scan response merged, smoothed RSSI).
public struct ScanResult: Hashable, Sendable {
    /// The PDU just received.
    public var advertisement: Advertisement
    /// The device's merged view after this PDU.
    public var device: KnownDevice

    public var address: BluetoothAddress { advertisement.address }
    public var addressType: AddressType { advertisement.addressType }
    public var rssi: Int8 { advertisement.rssi }
    /// Local name from the advertisement or the scan response.
    public var name: String? { device.name }
    /// Metres, from the smoothed RSSI and the advertised TX power or beacon calibration.
    public var estimatedMetres: Double? { device.estimatedMetres }
    /// The PHY the advertisement came on: LE 1M, or LE Coded for long range (a legacy
    /// report: LE 1M).
    public var primaryPHY: PHY { PHY(rawValue: advertisement.primaryPHY ?? 1) }
    /// The PHY of its auxiliary PDUs (its data, and a link it makes); nil for legacy PDUs.
    public var secondaryPHY: PHY? { advertisement.secondaryPHY.map(PHY.init(rawValue:)) }
}

/// A device's address with its type, as a connection names its peer.
public struct DeviceAddress: Hashable, Sendable, CustomStringConvertible {
    public var address: BluetoothAddress
    public var type: AddressType
    public init(_ address: BluetoothAddress, type: AddressType = .public) {
        self.address = address
        self.type = type
    }
    /// As `btctl scan` prints it: `/random` after a random address.
    public var description: String { type.rawValue & 1 == 1 ? "\(address)/random" : "\(address)" }
}

/// How the controller listens while it scans: for `window` of every `interval`
/// (LE_Scan_Window and LE_Scan_Interval, §7.8.10 and §7.8.64), as Bumble's
/// `scan_interval` and `scan_window` and Android's scan modes set them. Each is 2.5 ms
/// to 10.24 s, in steps of 0.625 ms (rounded to the nearest), the window at most the
/// interval (`BLEError.invalidArgument` otherwise).
public struct ScanTiming: Hashable, Sendable, CustomStringConvertible {
    public var interval: Duration
    public var window: Duration
    public init(interval: Duration, window: Duration) {
        self.interval = interval
        self.window = window
    }
    /// The host's default: 30 ms of every 60 ms.
    public static let standard = ScanTiming(interval: .milliseconds(60), window: .milliseconds(30))
    /// Listening all the time (Android's SCAN_MODE_LOW_LATENCY): the most heard,
    /// soonest, for the most radio time.
    public static let lowLatency = ScanTiming(interval: .milliseconds(60), window: .milliseconds(60))
    /// 512 ms of every 5.12 s (Android's SCAN_MODE_LOW_POWER): a tenth of the radio
    /// time, for a daemon that waits for its devices for hours.
    public static let lowPower = ScanTiming(interval: .milliseconds(5120), window: .milliseconds(512))

    public var description: String { "\(window) of every \(interval)" }

    /// In the commands' 0.625 ms units, rounded (0 for what is out of range: refused by `validate`).
    static func units(_ d: Duration) -> UInt16 {
        let u = (d / .microseconds(625)).rounded()
        return u.isFinite && u >= 0 && u <= Double(UInt16.max) ? UInt16(u) : 0
    }
    var intervalUnits: UInt16 { Self.units(interval) }
    var windowUnits: UInt16 { Self.units(window) }

    func validate() throws {
        let range: ClosedRange<UInt16> = 0x0004...0x4000
        guard range.contains(intervalUnits), range.contains(windowUnits), windowUnits <= intervalUnits else {
            throw BLEError.invalidArgument("a scan's interval and window are 2.5 ms to 10.24 s, the window at most the interval, not \(self)")
        }
    }

    /// Whether it listens for a smaller share of the time than `other` (or the same
    /// share over a longer interval).
    func listensLess(than other: ScanTiming) -> Bool {
        let (mine, theirs) = (UInt32(windowUnits) * UInt32(other.intervalUnits), UInt32(other.windowUnits) * UInt32(intervalUnits))
        return mine != theirs ? mine < theirs : intervalUnits > other.intervalUnits
    }
}

public struct Central: Sendable {
    public let host: BluetoothHost

    /// FA02: scans until the consumer stops iterating (or the transport ends). `filter`
    /// applies to each device's merged advertisement and scan response. Buffer: the
    /// newest `capacity` results; `dropped` counts the rest.
    ///
    /// Several scans may run at once, each with its own parameters: the controller
    /// scans for all of them together, as bluetoothd merges its clients' discovery
    /// filters (stopped and started again when that changes): actively while any scan
    /// is active (a passive scan is not handed the scan responses), filtering duplicates
    /// only while every scan does, with the `timing` that listens the most
    /// (`ScanTiming`), on every PHY any asks for.
    ///
    /// `filterDuplicates` hands this scan each advertising PDU once: the same address,
    /// kind of PDU, set and data (a device whose data changes is reported again), as
    /// Rootcanal's controller tells duplicates. The host filters them too, since the
    /// controller filters only while every scan asks for that and forgets what it
    /// reported whenever its scanning restarts (another scan starts or ends). The newest
    /// 4096 PDUs are remembered; an older one comes again. The device registry gets
    /// every report either way.
    ///
    /// `acceptListOnly` reports only the devices on the accept list
    /// (`BluetoothHost.setAcceptList`; a bonded device under privacy by its identity),
    /// as BlueZ's background scan for the devices it reconnects to: the controller
    /// filters them (Scanning_Filter_Policy 1) while every running scan asks for that,
    /// and the host filters them while another scan asks for all (the controller's
    /// scan is then stopped and started again without the list, and again with it
    /// when that scan ends). Meanwhile the list cannot change
    /// (`BLEError.acceptListInUse`). When the controller cannot take the list now
    /// (a connection attempt is under way) this throws `BLEError.acceptListInUse`.
    /// A bonded device that advertises from private addresses is told by the
    /// controller only through its resolving list (under privacy); when the controller
    /// does not resolve it, the controller scans for all and the host picks the list's
    /// devices out with the bonds' IRKs, as Linux does.
    ///
    /// `phys`: the primary PHYs to scan, LE 1M (every advertiser's legacy PDUs) and LE
    /// Coded (long-range advertising, `AdvertisingPHYs.longRange`), as Bumble's
    /// `scanning_phys`; LE Coded needs the extended commands (else
    /// `BLEError.notSupported`), and a controller without it refuses it. The
    /// controller scans every PHY a running scan asks for (stopped and started again
    /// as that changes); each scan gets the reports of its own PHYs
    /// (`ScanResult.primaryPHY`).
    public func scan(filter: ScanFilter = ScanFilter(), active: Bool = true, filterDuplicates: Bool = false,
                     acceptListOnly: Bool = false, phys: Set<PHY> = [.le1M], timing: ScanTiming = .standard,
                     capacity: Int = 256) async throws -> BufferedStream<ScanResult> {
        try await host.startScan(filter: filter, Self.settings(active: active, filterDuplicates: filterDuplicates, acceptListOnly: acceptListOnly,
                                                                   phys: phys, timing: timing), capacity: capacity)
    }

    /// What one scan asks of the controller (`BluetoothHost.addScan` checks it).
    static func settings(active: Bool, filterDuplicates: Bool, acceptListOnly: Bool, phys: Set<PHY>, timing: ScanTiming) -> BluetoothHost.ScanSettings {
        BluetoothHost.ScanSettings(active: active, filterDuplicates: filterDuplicates, acceptListOnly: acceptListOnly, phys: PHY.bits(phys),
                                          timing: timing)
    }

    /// Scans for `window` and returns every result heard, in the order heard. The
    /// window is measured on this host's loop, but what it holds is decided by the
    /// HCI conversation alone: a report counts when the controller sent it before it
    /// answered LE Set Scan Enable (off), however late the host's threads got to it,
    /// so a replay of a recording picks the same results as the recorded run did.
    /// The scan has stopped when this returns (unless another scan of this host is
    /// still running; then the results are those handed over within the window).
    /// Cancelling stops the scan and throws `CancellationError`. The results are taken
    /// as they come; `capacity` bounds those waiting to be taken (beyond it the oldest
    /// waiting would go, which a caller that only waits here does not reach).
    /// `acceptListOnly`, `phys` and `timing` as
    /// `scan(filter:active:filterDuplicates:acceptListOnly:phys:timing:capacity:)` takes them.
    public func scan(for window: Duration, filter: ScanFilter = ScanFilter(), active: Bool = true,
                     acceptListOnly: Bool = false, phys: Set<PHY> = [.le1M], timing: ScanTiming = .standard,
                     capacity: Int = 1024) async throws -> [ScanResult] {
        let (id, stream) = try await host.addScan(filter: filter, Self.settings(active: active, filterDuplicates: false, acceptListOnly: acceptListOnly,
                                                                                    phys: phys, timing: timing), capacity: capacity)
        var results: [ScanResult] = []
        await withTaskGroup(of: Void.self) { g in
            g.addTask { [host] in
                try? await host.loop.sleep(for: window)
                await host.finishScan(id)
                // The host takes the answer's Command Complete as it arrives; should none
                // come (a controller that never answers), end the wait anyway.
                try? await host.loop.sleep(for: .seconds(2))
                if !Task.isCancelled { await host.flushDraining() }
            }
            // Ends when the host takes the stop's answer (or on cancellation).
            for await r in stream { results.append(r) }
            g.cancelAll()
        }
        try Task.checkCancellation()
        return results
    }

    /// Scans until a device matching `filter` shows up, within `limit`. The scan has
    /// stopped (LE Set Scan Enable off sent and answered) when this returns, unless
    /// another scan of this host is still running.
    /// `phys`: the primary PHYs to scan (LE Coded finds a long-range device).
    public func first(matching filter: ScanFilter, within limit: Duration, phys: Set<PHY> = [.le1M]) async throws -> ScanResult? {
        let found = await firstElement(try await scan(filter: filter, phys: phys), within: limit, on: host.loop)
        // Letting go of the results queued the scan stop; send it now.
        await host.settle()
        return found
    }

    /// FA03: every device seen or connected, most recently seen first.
    public var knownPeripherals: [KnownDevice] { get async { await host.registry.all } }

    /// FA03: one known device.
    public func knownPeripheral(_ address: BluetoothAddress) async -> KnownDevice? { await host.registry.device(address) }

    /// FA03: the peripherals we are connected to as central.
    public var connectedPeripherals: [RemotePeripheral] {
        get async { await host.links.remotes.values.filter { $0.connection.role == .central }.sorted { $0.connection.handle < $1.connection.handle } }
    }

    /// FA04: connects (LE Create Connection) and opens GATT with the MTU exchanged
    /// (the host's `attMTU`).
    /// Throws `BLEError.connectionTimeout` after `limit` and `CancellationError` when
    /// the task is cancelled; either way LE Create Connection Cancel is sent.
    ///
    /// The link, not GATT, decides whether this succeeds: the MTU exchange waits for
    /// the answer within what is left of `limit`, and a server that refuses it or has
    /// not answered by then still gets its link (ATT_MTU 23 until an answer comes; see
    /// `RemotePeripheral.mtu`). Only the link's end throws after it is up.
    ///
    /// `phys`: the PHYs to initiate on (Initiating_PHYs of LE Extended Create
    /// Connection): LE 1M and LE Coded name the primary PHYs on which the peer's
    /// advertising is listened for, LE 2M (with one of them) lets an extended
    /// advertisement whose data goes on LE 2M be answered. A peer advertising long
    /// range is reached with `.leCoded` among them, and the link starts on its
    /// advertisement's secondary PHY. Other than `[.le1M]` needs the extended commands
    /// (else `BLEError.notSupported`).
    ///
    /// `parameters`: the link's connection interval range, latency and supervision
    /// timeout (the controller picks the interval; Rootcanal and the virtual radio
    /// take the maximum). Values outside the specification's ranges, or a timeout not
    /// longer than (1 + latency) × the maximum interval × 2, are
    /// `BLEError.invalidArgument` before anything is sent (`LEConnectionParameters.fault`).
    /// `BluetoothHost.parameters(of:)` says what the link got.
    public func connect(to address: BluetoothAddress, type: AddressType = .public, within limit: Duration = .seconds(10),
                        parameters: LEConnectionParameters = LEConnectionParameters(), phys: Set<PHY> = [.le1M]) async throws -> RemotePeripheral {
        try await connect(toAnyOf: [DeviceAddress(address, type: type)], within: limit, parameters: parameters, phys: phys)
    }

    /// Connects to whichever of `peers` the controller finds advertising connectably
    /// first, through its Filter Accept List (LE Create Connection with
    /// Initiator_Filter_Policy 1), as BlueZ's auto-connect and Android's
    /// `autoConnect` do: a receiver that takes the first of several sensors, a hub
    /// reconnecting to whichever device comes back. The returned peripheral's
    /// `connection.peer` says which. The host owns the list: it fills it with the peers
    /// not connected already for this attempt (all connected:
    /// `BLEError.invalidArgument`; one left: connected to directly, as
    /// `connect(to:type:)`). More than the list holds (LE Read Filter Accept List Size)
    /// is `BLEError.invalidArgument`. Throws `BLEError.noConnection(toAnyOf:within:)`
    /// after `limit`; otherwise as `connect(to:type:)`.
    public func connect(toAnyOf peers: [DeviceAddress], within limit: Duration = .seconds(10),
                        parameters: LEConnectionParameters = LEConnectionParameters(), phys: Set<PHY> = [.le1M]) async throws -> RemotePeripheral {
        let started = host.loop.now
        let c = try await host.connect(toAnyOf: peers, within: limit, parameters: parameters, phys: phys)
        guard let r = await host.gattPeer(on: c) else { throw BLEError.disconnected(reason: .unknownConnectionIdentifier) }
        if await host.needsMTUExchange(c) {
            let spent: TimeAmount = host.loop.now - started
            try await r.exchangeMTU(within: max(limit - .nanoseconds(spent.nanoseconds), .zero))
        }
        return r
    }

    /// Connects to the device `result` came from, on the PHYs it advertised on (its
    /// primary PHY, and the secondary of extended advertising).
    public func connect(to result: ScanResult, within limit: Duration = .seconds(10),
                        parameters: LEConnectionParameters = LEConnectionParameters()) async throws -> RemotePeripheral {
        let phys = Set([result.primaryPHY] + (result.secondaryPHY.map { [$0] } ?? [])).filter(\.isKnown)
        return try await connect(to: result.address, type: result.addressType, within: limit, parameters: parameters, phys: phys.isEmpty ? [.le1M] : phys)
    }
}
