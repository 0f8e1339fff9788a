// Link-layer parameters of a connection: connection interval, latency and
// supervision timeout (both roles), data length and PHY (when the controller has
// them; "Unknown HCI Command" and "Unsupported Feature" mean "not here", not an error).

import ATT
import GAP
import GATT
import HCI
import L2CAP
import NIOCore

/// A link's connection parameters (LE Connection Complete, then LE Connection Update
/// Complete).
public struct ConnectionParameters: Hashable, Sendable, CustomStringConvertible {
    /// Connection interval in 1.25 ms units.
    public var interval: UInt16
    public var latency: UInt16
    /// Supervision timeout in 10 ms units.
    public var supervisionTimeout: UInt16
    public init(interval: UInt16, latency: UInt16, supervisionTimeout: UInt16) {
        self.interval = interval
        self.latency = latency
        self.supervisionTimeout = supervisionTimeout
    }
    init(_ u: LEConnectionUpdateComplete) {
        self.init(interval: u.connectionInterval, latency: u.peripheralLatency, supervisionTimeout: u.supervisionTimeout)
    }
    public var description: String {
        "interval \(Double(interval) * 1.25) ms, latency \(latency), timeout \(Int(supervisionTimeout) * 10) ms"
    }
}

/// What a link procedure waits for: a link-layer event of its link (by link id, which
/// a reused handle does not repeat), or the link's end.
enum LinkOutcome: Sendable {
    case event(UInt64, L2CAPHost.LinkLayerEvent)
    case ended(UInt64, HCIStatus)
}

/// How a link procedure (`linkProcedure`) ended, when the link did not.
enum LinkProcedureEnd<T: Sendable>: Sendable {
    /// The controller does not have the command (or the peer the procedure).
    case notSupported
    /// No answer within the limit.
    case timedOut
    case answered(T)

    var answer: T? {
        if case let .answered(t) = self { return t }
        return nil
    }
}

/// A PHY of an LE link (Vol 6, Part A, §3): as LE Read PHY and LE PHY Update Complete
/// name it.
public struct PHY: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    public var rawValue: UInt8
    public init(rawValue: UInt8) { self.rawValue = rawValue }
    /// 1 Msym/s, every controller's.
    public static let le1M = PHY(rawValue: 1)
    /// 2 Msym/s: twice the data rate (LE feature bit 8).
    public static let le2M = PHY(rawValue: 2)
    /// 1 Msym/s coded (S=2 or S=8): up to four times the range (LE feature bit 11).
    public static let leCoded = PHY(rawValue: 3)

    var isKnown: Bool { (1...3).contains(rawValue) }
    /// PHY preferences each way: at least one, each LE 1M, LE 2M or LE Coded.
    static func validate(tx: Set<PHY>, rx: Set<PHY>, _ call: String) throws {
        guard !tx.isEmpty, !rx.isEmpty, tx.union(rx).allSatisfy(\.isKnown) else {
            throw BLEError.invalidArgument("\(call) takes at least one of LE 1M, LE 2M and LE Coded each way")
        }
    }
    /// TX_PHYs/RX_PHYs of LE Set PHY: bit 0 LE 1M, 1 LE 2M, 2 LE Coded.
    /// An unknown PHY gives bit 7, which every command refuses.
    static func bits(_ phys: Set<PHY>) -> UInt8 { phys.reduce(0) { $0 | ($1.isKnown ? 1 << ($1.rawValue - 1) : 0x80) } }

    public var description: String {
        switch rawValue {
        case 1: return "LE 1M"
        case 2: return "LE 2M"
        case 3: return "LE Coded"
        default: return "PHY 0x\(hex2(rawValue))"
        }
    }
}

/// The PHYs a link uses: `tx` for what this side sends, `rx` for what it receives.
public struct LinkPHY: Hashable, Sendable, CustomStringConvertible {
    public var tx: PHY
    public var rx: PHY
    public init(tx: PHY, rx: PHY) {
        self.tx = tx
        self.rx = rx
    }
    public var description: String { tx == rx ? "\(tx)" : "\(tx) out, \(rx) in" }
}

/// The largest link-layer payloads each way and how long they take on air (LE Data
/// Length Change, Vol 6, Part B, §4.5.10): 27 octets and 328 µs until a side asks for
/// more (`updateDataLength`, or its controller's suggested default,
/// `setPreferredDataLength`), up to 251 octets.
public struct DataLength: Hashable, Sendable, CustomStringConvertible {
    /// What every link starts with: 27 octets in 328 µs each way.
    public static let initial = DataLength(maxTxOctets: 27, maxTxTimeMicroseconds: 328, maxRxOctets: 27, maxRxTimeMicroseconds: 328)
    public var maxTxOctets: Int
    public var maxTxTimeMicroseconds: Int
    public var maxRxOctets: Int
    public var maxRxTimeMicroseconds: Int
    public init(maxTxOctets: Int, maxTxTimeMicroseconds: Int, maxRxOctets: Int, maxRxTimeMicroseconds: Int) {
        self.maxTxOctets = maxTxOctets
        self.maxTxTimeMicroseconds = maxTxTimeMicroseconds
        self.maxRxOctets = maxRxOctets
        self.maxRxTimeMicroseconds = maxRxTimeMicroseconds
    }
    init(_ e: LEDataLengthChange) {
        self.init(maxTxOctets: Int(e.maxTxOctets), maxTxTimeMicroseconds: Int(e.maxTxTime), maxRxOctets: Int(e.maxRxOctets),
                  maxRxTimeMicroseconds: Int(e.maxRxTime))
    }
    public var description: String {
        "\(maxTxOctets) octets (\(maxTxTimeMicroseconds) µs) out, \(maxRxOctets) octets (\(maxRxTimeMicroseconds) µs) in"
    }

    /// TX_Octets and TX_Time as LE Set Data Length and LE Write Suggested Default Data
    /// Length take them (§7.8.33, §7.8.35): 27 to 251 octets, 328 to 17040 µs.
    static func validate(txOctets: Int, txTime: Int, _ call: String) throws -> (octets: UInt16, time: UInt16) {
        guard let o = UInt16(exactly: txOctets), let t = UInt16(exactly: txTime),
              LEDataLengthRange.octets.contains(o), LEDataLengthRange.time.contains(t) else {
            throw BLEError.invalidArgument("\(call) takes 27 to 251 octets and 328 to 17040 µs, not \(txOctets) octets in \(txTime) µs")
        }
        return (o, t)
    }
}

extension BluetoothHost {
    /// Asks for new connection parameters (interval in 1.25 ms units, timeout in 10 ms
    /// units). As central: LE Connection Update. As peripheral: the L2CAP Connection
    /// Parameter Update Request, which the central may refuse. Returns the parameters
    /// in force once LE Connection Update Complete arrives, or nil if none arrived
    /// within `limit`: at once when the central refused (or rejected) the request,
    /// else when `limit` passed (it did not answer, or did not update the link).
    /// Parameters outside the specification's ranges, or a timeout not longer than
    /// (1 + latency) × `intervalMax` × 2, are `BLEError.invalidArgument`
    /// (`LEConnectionParameters.fault`), before anything is sent.
    @discardableResult
    public func updateParameters(_ c: Connection, intervalMin: UInt16, intervalMax: UInt16, latency: UInt16 = 0,
                                 supervisionTimeout: UInt16, within limit: Duration = .seconds(10)) async throws -> ConnectionParameters? {
        let wanted = LEConnectionParameters(connectionIntervalMin: intervalMin, connectionIntervalMax: intervalMax, maxLatency: latency,
                                            supervisionTimeout: supervisionTimeout)
        if let fault = wanted.fault { throw BLEError.invalidArgument("updateParameters: \(fault)") }
        let end = try await linkProcedure(c, within: limit, start: {
            if c.role == .central {
                try await self.controller.send(LEConnectionUpdate(connectionHandle: c.handle, connection: wanted))
                return true
            }
            let request = ConnectionParameterUpdate(intervalMin: intervalMin, intervalMax: intervalMax, latency: latency, timeout: supervisionTimeout)
            do {
                return try await self.l2cap.requestParameterUpdate(request, handle: c.handle, within: limit)
            } catch L2CAPChannelError.timedOut {
                return false
            } catch {
                throw BLEError.disconnected(reason: .unknownConnectionIdentifier)
            }
        }, until: { e -> LEConnectionUpdateComplete? in
            if case let .parametersUpdated(u) = e { return u } else { return nil }
        })
        // A failed LE Connection Update Complete: the parameters stay, as when refused.
        guard let u = end.answer, u.status.isSuccess else { return nil }
        return ConnectionParameters(u)
    }

    /// Asks for longer (or shorter) packets on link `c` (LE Set Data Length): at most
    /// `txOctets` octets taking `txTime` µs per PDU from this side, as Bumble's
    /// `set_data_length` and Zephyr's `bt_conn_le_data_len_update` do. What the peer
    /// sends is its side's choice. Returns the data length in force once LE Data Length
    /// Change arrives; the controllers report none when nothing changed, so after
    /// `limit` without one it returns what was in force. The link's end ends the wait
    /// at once with `BLEError.disconnected`. Nil when the controller does not have the
    /// command (Unknown HCI Command, Unsupported Feature or Parameter Value).
    /// `ConnectionEvent.dataLengthChanged` reports the change too, and those the peer
    /// starts.
    @discardableResult
    public func updateDataLength(_ c: Connection, txOctets: Int = 251, txTime: Int = 2120,
                                 within limit: Duration = .seconds(2)) async throws -> DataLength? {
        let (octets, time) = try DataLength.validate(txOctets: txOctets, txTime: txTime, "updateDataLength")
        let before = links.dataLengths[c.id] ?? .initial
        // Asking for what is in force changes nothing: no event will come.
        let unchanged = before.maxTxOctets == txOctets && before.maxTxTimeMicroseconds == txTime
        let end = try await linkProcedure(c, within: unchanged ? .zero : limit, start: {
            try await self.optional { try await self.controller.send(LESetDataLength(connectionHandle: c.handle, txOctets: octets, txTime: time)) }
        }, until: { e -> DataLength? in
            if case let .dataLengthChanged(d) = e { return DataLength(d) } else { return nil }
        })
        switch end {
        case .notSupported: return nil
        case let .answered(d): return d
        case .timedOut: return links.dataLengths[c.id] ?? .initial
        }
    }

    /// Link `c`'s connection parameters now: LE Connection Complete's, then the last
    /// LE Connection Update Complete's (either side may change them).
    public func parameters(of c: Connection) throws -> ConnectionParameters {
        guard isActive(c.id), let p = links.parameters[c.id] else { throw BLEError.disconnected(reason: .unknownConnectionIdentifier) }
        return p
    }

    /// TGAP(conn_pause_peripheral) (Vol 3, Part C, Appendix A): how long a peripheral
    /// leaves a new link alone before it asks for other parameters.
    static let connectionPausePeripheral = Duration.seconds(5)

    /// As peripheral with `requestsPreferredParameters`: TGAP(conn_pause_peripheral)
    /// after link `c` came up, asks its central for the preferred connection parameters
    /// unless the link meets them already, as Zephyr's
    /// `CONFIG_BT_GAP_AUTO_UPDATE_CONN_PARAMS` does. The timer goes with the link.
    func scheduleParameterRequest(_ c: Connection) {
        guard c.role == .peripheral, requestsPreferredParameters, preferredConnectionParameters?.request != nil else { return }
        links.parameterRequests[c.id] = LoopTimer(after: Self.connectionPausePeripheral, on: loop) { [weak self] in
            guard let self else { return }
            Task { await self.requestPreferredParameters(c) }
        }
    }

    func requestPreferredParameters(_ c: Connection) async {
        links.parameterRequests[c.id] = nil
        guard let p = preferredConnectionParameters, let r = p.request, let now = links.parameters[c.id], isActive(c.id),
              !p.isMet(interval: now.interval, latency: now.latency, supervisionTimeout: now.supervisionTimeout) else { return }
        do {
            let got = try await updateParameters(c, intervalMin: r.intervalMin, intervalMax: r.intervalMax, latency: r.latency,
                                                 supervisionTimeout: r.supervisionTimeout, within: .seconds(30))
            logger.debug("preferred connection parameters asked for", metadata: ["ble.handle": "\(c.handle)", "ble.parameters": "\(got.map { "\($0)" } ?? "refused")"])
        } catch {
            logger.debug("preferred connection parameters not asked for", metadata: ["ble.handle": "\(c.handle)", "error": "\(error)"])
        }
    }

    /// Link `c`'s data length now, as the last LE Data Length Change said
    /// (`DataLength.initial` before any). No HCI command reads it.
    public func dataLength(of c: Connection) throws -> DataLength {
        guard isActive(c.id) else { throw BLEError.disconnected(reason: .unknownConnectionIdentifier) }
        return links.dataLengths[c.id] ?? .initial
    }

    /// What this side offers to send per PDU on every new link (LE Write Suggested
    /// Default Data Length): above 27 octets, the controllers agree on longer packets as
    /// the link comes up, and `ConnectionEvent.dataLengthChanged` says so. BlueZ and
    /// Bumble write 251 octets and 2120 µs at start-up; this host leaves the
    /// controller's default (27 and 328) until asked, so that start-up stays the same
    /// HCI conversation. Kept across `reset()`. `BLEError.notSupported` when the
    /// controller does not have the command.
    public func setPreferredDataLength(txOctets: Int = 251, txTime: Int = 2120) async throws {
        try requireReady()
        let (octets, time) = try DataLength.validate(txOctets: txOctets, txTime: txTime, "setPreferredDataLength")
        guard info?.supports(.leWriteSuggestedDefaultDataLength) == true else {
            throw BLEError.notSupported("the controller has no suggested data length (LE Write Suggested Default Data Length)")
        }
        let command = LEWriteSuggestedDefaultDataLength(suggestedMaxTxOctets: octets, suggestedMaxTxTime: time)
        try await controller.send(command)
        preferredDataLength = command
    }

    /// The PHYs link `c` uses each way now (LE Read PHY). `BLEError.notSupported` when
    /// the controller does not have the command (it has LE 1M only).
    public func phy(of c: Connection) async throws -> LinkPHY {
        try requireReady()
        guard isActive(c.id) else { throw BLEError.disconnected(reason: .unknownConnectionIdentifier) }
        guard info?.supports(.leReadPHY) == true else { throw BLEError.notSupported("the controller cannot read a link's PHY (LE Read PHY): it has LE 1M only") }
        let r = try await controller.send(LEReadPHY(connectionHandle: c.handle))
        return LinkPHY(tx: PHY(rawValue: r.txPHY), rx: PHY(rawValue: r.rxPHY))
    }

    /// Asks for other PHYs on link `c` (LE Set PHY), `tx` for what we send and `rx` for
    /// what we receive, as Bumble's `set_connection_phy` and Android's
    /// `setPreferredPhy` do; either side may ask. The controllers agree on one PHY each
    /// way among those both allow (LE 2M doubles the data rate, LE Coded reaches
    /// farther), and keep a way's PHY when they share none. Returns the PHYs in force
    /// once LE PHY Update Complete arrives; `ConnectionEvent.phyUpdated` reports it too,
    /// and an update the peer starts. The link's end ends the wait at once with
    /// `BLEError.disconnected`. Nil when the controller or the peer does not do
    /// PHY updates (Unknown HCI Command, Unsupported Feature or Parameter Value,
    /// Unsupported Remote Feature), or no answer came within `limit`.
    @discardableResult
    public func updatePHY(_ c: Connection, tx: Set<PHY> = [.le2M], rx: Set<PHY> = [.le2M],
                          within limit: Duration = .seconds(10)) async throws -> LinkPHY? {
        try PHY.validate(tx: tx, rx: rx, "updatePHY")
        let command = LESetPHY(connectionHandle: c.handle, txPHYs: PHY.bits(tx), rxPHYs: PHY.bits(rx))
        let answer = try await askController(c, within: limit, command, status: \.status) { e in
            if case let .phyUpdated(u) = e { return u } else { return nil }
        }
        guard let done = answer else { return nil }
        return LinkPHY(tx: PHY(rawValue: done.txPHY), rx: PHY(rawValue: done.rxPHY))
    }

    /// The PHYs this side allows on every link (LE Set Default PHY), `tx` for what it
    /// sends and `rx` for what it receives: a PHY update either side starts lands on
    /// one of them each way (LE 1M stays possible: every link starts on it). Kept across
    /// `reset()`. `BLEError.notSupported` when the controller does not have the command.
    public func setPreferredPHYs(tx: Set<PHY>, rx: Set<PHY>) async throws {
        try requireReady()
        try PHY.validate(tx: tx, rx: rx, "setPreferredPHYs")
        guard info?.supports(.leSetDefaultPHY) == true else { throw BLEError.notSupported("the controller has no PHY preferences (LE Set Default PHY): it has LE 1M only") }
        try await controller.send(LESetDefaultPHY(txPHYs: PHY.bits(tx), rxPHYs: PHY.bits(rx)))
        preferredPHYs = (tx, rx)
    }

    /// Runs a procedure on link `c`: `start` sends its command (false: the controller
    /// or the peer does not have it), then the first link-layer event of this link that
    /// `match` takes ends it. Subscribed before `start`, so an answer that comes at
    /// once is not missed. The link's end ends the wait at once with
    /// `BLEError.disconnected`, as does a link already gone.
    func linkProcedure<T: Sendable>(_ c: Connection, within limit: Duration, start: () async throws -> Bool,
                                    until match: @escaping @Sendable (L2CAPHost.LinkLayerEvent) -> T?) async throws -> LinkProcedureEnd<T> {
        try requireReady()
        guard isActive(c.id) else { throw BLEError.disconnected(reason: .unknownConnectionIdentifier) }
        let outcomes = linkOutcomes.subscribe(capacity: 64)
        let begin = loop.now
        guard try await start() else { return .notSupported }
        let left = limit - Duration(loop.now - begin)
        let id = c.id
        let outcome = await firstElement(outcomes.compactMap { o -> Result<T, BLEError>? in
            switch o {
            case let .event(link, e) where link == id: return match(e).map { .success($0) }
            case let .ended(link, reason) where link == id: return .failure(.disconnected(reason: reason))
            default: return nil
            }
        }, within: max(left, .zero), on: controller.loop)
        if let outcome { return .answered(try outcome.get()) }
        guard isActive(c.id) else { throw BLEError.disconnected(reason: .unknownConnectionIdentifier) }
        return .timedOut
    }

    /// A procedure on link `c` that one command starts and one event answers
    /// (`linkProcedure`): the answer, or nil when the controller or the peer does not
    /// have it (Unknown HCI Command, Unsupported Feature or Parameter Value, Unsupported
    /// Remote Feature, in the command's status or the answer's) or no answer came within
    /// `limit`. Any other failed status throws `HCIError.commandFailed`.
    func askController<Answer: Sendable>(_ c: Connection, within limit: Duration, _ command: some HCICommand & Sendable,
                                         status: (Answer) -> HCIStatus,
                                         until match: @escaping @Sendable (L2CAPHost.LinkLayerEvent) -> Answer?) async throws -> Answer? {
        let end = try await linkProcedure(c, within: limit, start: { try await self.optional { try await self.controller.send(command) } }, until: match)
        guard let answer = end.answer else { return nil }
        let s = status(answer)
        guard s.isSuccess else {
            if Self.notSupported.contains(s) { return nil }
            throw HCIError.commandFailed(opcode: type(of: command).opcode, status: s)
        }
        return answer
    }

    /// The statuses that say the controller or the peer does not have a procedure:
    /// Unknown HCI Command, Unsupported Feature or Parameter Value, Unsupported Remote Feature.
    static let notSupported: [HCIStatus] = [.unknownCommand, .unsupportedFeatureOrParameterValue, HCIStatus(rawValue: 0x1A)]

    /// Runs an optional command: false for Unknown HCI Command, Unsupported Feature or
    /// Parameter Value and Unsupported Remote Feature (0x1A), else rethrows.
    func optional(_ body: () async throws -> Void) async throws -> Bool {
        do {
            try await body()
            return true
        } catch let HCIError.commandFailed(_, status) where Self.notSupported.contains(status) {
            logger.debug("optional command not supported", metadata: ["hci.status": "\(status)"])
            return false
        }
    }
}

extension RemotePeripheral {
    /// The link's PHYs now; see `BluetoothHost.phy(of:)`.
    public func phy() async throws -> LinkPHY { try await host.phy(of: connection) }

    /// The link's connection parameters now; see `BluetoothHost.parameters(of:)`.
    public func parameters() async throws -> ConnectionParameters { try await host.parameters(of: connection) }

    /// The link's data length now; see `BluetoothHost.dataLength(of:)`.
    public func dataLength() async throws -> DataLength { try await host.dataLength(of: connection) }

    /// See `BluetoothHost.updateDataLength`.
    @discardableResult
    public func updateDataLength(txOctets: Int = 251, txTime: Int = 2120, within limit: Duration = .seconds(2)) async throws -> DataLength? {
        try await host.updateDataLength(connection, txOctets: txOctets, txTime: txTime, within: limit)
    }

    /// See `BluetoothHost.updatePHY`.
    @discardableResult
    public func updatePHY(tx: Set<PHY> = [.le2M], rx: Set<PHY> = [.le2M], within limit: Duration = .seconds(10)) async throws -> LinkPHY? {
        try await host.updatePHY(connection, tx: tx, rx: rx, within: limit)
    }

    /// See `BluetoothHost.updateParameters`.
    @discardableResult
    public func updateParameters(intervalMin: UInt16, intervalMax: UInt16, latency: UInt16 = 0, supervisionTimeout: UInt16,
                                 within limit: Duration = .seconds(10)) async throws -> ConnectionParameters? {
        try await host.updateParameters(connection, intervalMin: intervalMin, intervalMax: intervalMax, latency: latency,
                                        supervisionTimeout: supervisionTimeout, within: limit)
    }

    /// The connection the peripheral would have (its GAP service's Peripheral Preferred
    /// Connection Parameters, Vol 3, Part C, §12.3), as BlueZ's central reads them;
    /// nil when it has none. `GATTClientError.malformedEntry` when the value is
    /// not 8 octets or outside §12.3's ranges.
    public func preferredConnectionParameters() async throws -> PreferredConnectionParameters? {
        let c: RemoteCharacteristic
        do {
            c = try await characteristic(GATTCharacteristicType.peripheralPreferredConnectionParameters, in: BluetoothUUID(0x1800))
        } catch BLEError.notSupported {
            return nil
        }
        let value = try await read(c)
        guard let p = PreferredConnectionParameters(value: value), p.isValid else {
            throw GATTClientError.malformedEntry(.readResponse, handle: c.valueHandle,
                                                 reason: "Peripheral Preferred Connection Parameters are 8 octets in §12.3's ranges, not \(value.hexString)")
        }
        return p
    }

    /// Gives the peripheral the connection it prefers (`preferredConnectionParameters()`,
    /// then `updateParameters` with `PreferredConnectionParameters.request`), as BlueZ
    /// applies them. Nil when it states none, no interval, or the update did not
    /// happen.
    @discardableResult
    public func updateToPreferredParameters(within limit: Duration = .seconds(10)) async throws -> ConnectionParameters? {
        guard let r = try await preferredConnectionParameters()?.request else { return nil }
        return try await updateParameters(intervalMin: r.intervalMin, intervalMax: r.intervalMax, latency: r.latency,
                                          supervisionTimeout: r.supervisionTimeout, within: limit)
    }
}
