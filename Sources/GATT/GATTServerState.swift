// The GATT server's answers to ATT requests (Core Specification v5.4, Vol 3, Part F,
// §3.4 and Part G, §4), sans I/O. The database is shared by all connections; the
// Client Characteristic Configuration and the prepared-write queue are per
// connection. Each request gets its response PDU (often an Error Response with the
// code and handle the specification names) plus the effects the owner acts on.

import ATT
import BLECrypto
import HCI

/// What the link has achieved, for permission checks (§3.2.5).
public struct LinkSecurity: Hashable, Sendable {
    public var encrypted: Bool
    public var authenticated: Bool
    public var authorized: Bool
    /// The encryption key size in octets (7...16) while encrypted.
    public var keySize: Int
    /// A long-term key is stored for the peer (it has bonded with us), so it can encrypt
    /// the link without pairing. It decides how an unencrypted link is refused an
    /// attribute that needs encryption (Vol 3, Part C, §10.3.1): Insufficient
    /// Encryption with a key to encrypt with, Insufficient Authentication without one.
    public var keyAvailable: Bool
    public init(encrypted: Bool = false, authenticated: Bool = false, authorized: Bool = false, keySize: Int = 16, keyAvailable: Bool = false) {
        self.encrypted = encrypted
        self.authenticated = authenticated
        self.authorized = authorized
        self.keySize = keySize
        self.keyAvailable = keyAvailable
    }
}

/// A bonded client's Connection Signature Resolving Key (Vol 3, Part H, §2.4.5): what
/// its Signed Write Commands are verified with (Vol 3, Part C, §10.4.2).
public struct SigningKey: Hashable, Sendable {
    /// The CSRK the client distributed, 16 octets least significant first.
    public var csrk: [UInt8]
    /// The last SignCounter accepted from the client (kept with the bond); a signed
    /// write must carry a greater one, so none can be replayed. Nil: none yet.
    public var counter: UInt32?
    /// What a verified signature proves, for permission checks: the security of the
    /// pairing that distributed the key (data signing is LE security mode 2: level 2
    /// when that pairing was authenticated, level 1 otherwise).
    public var security: LinkSecurity

    public init(csrk: [UInt8], counter: UInt32? = nil, security: LinkSecurity) {
        self.csrk = csrk
        self.counter = counter
        self.security = security
    }
}

public struct GATTServerState: Sendable {
    public enum Effect: Hashable, Sendable {
        /// A client wrote a characteristic value or descriptor (not a CCCD).
        case written(handle: UInt16, value: [UInt8], connection: UInt16)
        /// A client changed its Client Characteristic Configuration for `valueHandle`.
        case subscription(valueHandle: UInt16, connection: UInt16, notify: Bool, indicate: Bool)
        /// A Signed Write Command from `connection` verified with its `SigningKey`, whose
        /// counter is now `counter`: the owner keeps it with the client's bond.
        case signCounter(connection: UInt16, counter: UInt32)
        /// What a bond keeps of `connection` beside its CCCDs changed (`ClientRecord`):
        /// it set Client Supported Features bits, or it became change-aware.
        case clientRecordChanged(connection: UInt16)
    }

    /// What a GATT server keeps of a bonded client across connections: its Client
    /// Characteristic Configurations (§3.3.3.3), its Client Supported Features (§7.2),
    /// and the Database Hash it is aware of (the hash when it was last change-aware,
    /// §2.5.2.1): a different hash at its next connection means the database changed
    /// while it was away.
    public struct ClientRecord: Hashable, Sendable {
        public var configurations: [UInt16: UInt16]
        public var supportedFeatures: UInt8
        /// The Database Hash of the database as the client last knew it: the current
        /// one while it is change-aware, the one before a change it has not taken in
        /// (not confirmed Service Changed for, not read the hash since); nil when the
        /// database has no hash.
        public var awareOfHash: [UInt8]?

        public init(configurations: [UInt16: UInt16] = [:], supportedFeatures: UInt8 = 0, awareOfHash: [UInt8]? = nil) {
            self.configurations = configurations
            self.supportedFeatures = supportedFeatures
            self.awareOfHash = awareOfHash
        }
    }

    public var database: AttributeDatabase
    /// Prepared writes a connection may queue before Prepare Queue Full.
    public var prepareQueueLimit: Int
    /// The smallest key size an attribute that needs encryption or authentication
    /// accepts; a smaller one gets Insufficient Encryption Key Size.
    public var minimumKeySize = 7
    private var configurations = HandleMap<HandleMap<UInt16>>()  // connection → CCCD handle → value
    private var prepared: [UInt16: [(handle: UInt16, offset: Int, value: [UInt8])]] = [:]
    /// Client Supported Features per connection (§7.2); bit 0 = robust caching.
    private var clientFeatures: [UInt16: UInt8] = [:]
    /// Connections with robust caching that have not seen the latest change (§2.5.2.1).
    private var changeUnaware: Set<UInt16> = []
    /// Of those: the ones sent Database Out Of Sync, and the ones that read the Database
    /// Hash, since they became change-unaware (their next request may make them aware).
    private var outOfSyncSent: Set<UInt16> = []
    private var hashRead: Set<UInt16> = []
    /// The Database Hash each connection's client last knew, while that is not the
    /// current one (it has not taken in a change yet, whether or not it caches robustly).
    private var behind: [UInt16: [UInt8]] = [:]
    /// The latest changes of the database, oldest first: the hash before each and the
    /// handles it touched, so a client back from a known hash is told only what
    /// changed since (`changes(since:)`).
    private var changeLog: [(before: [UInt8], range: ClosedRange<UInt16>)] = []
    /// How many changes `changeLog` keeps; a client that knew an older database is
    /// told of 0x0001–0xFFFF.
    public static let changesKept = 64
    /// The signing key of each connection whose client is bonded with one.
    private var signing: [UInt16: SigningKey] = [:]

    public init(database: AttributeDatabase = AttributeDatabase(), prepareQueueLimit: Int = 64) {
        self.database = database
        self.prepareQueueLimit = prepareQueueLimit
    }

    /// The Client Characteristic Configuration value `connection` has set for `valueHandle`.
    public func configuration(valueHandle: UInt16, connection: UInt16) -> (notify: Bool, indicate: Bool) {
        guard let cccd = database.clientConfigurationHandle(of: valueHandle) else { return (false, false) }
        let v = configurations[connection]?[cccd] ?? 0
        return (v & 1 != 0, v & 2 != 0)
    }

    /// The Client Characteristic Configuration values `connection` has set, by CCCD
    /// handle (zeros left out): what a bond keeps for this client.
    public func clientConfigurations(connection: UInt16) -> [UInt16: UInt16] {
        (configurations[connection] ?? [:]).filter { $0.value != 0 }.dictionary
    }

    /// The characteristics `connection` is subscribed to, by value handle in handle
    /// order, with what it asked for (a CCCD with neither bit set is left out).
    public func subscriptions(connection: UInt16) -> [(valueHandle: UInt16, notify: Bool, indicate: Bool)] {
        clientConfigurations(connection: connection).sorted { $0.key < $1.key }.compactMap { h, v in
            guard case let .clientConfiguration(valueHandle, _)? = database.attribute(h)?.role, v & 3 != 0 else { return nil }
            return (valueHandle, v & 1 != 0, v & 2 != 0)
        }
    }

    /// Puts back a bonded client's CCCD values (they persist across connections for
    /// bonded devices, Vol 3, Part G, §3.3.3.3), in handle order. A handle that is no
    /// longer a CCCD is skipped, and bits the characteristic no longer allows are
    /// dropped (the database may have changed since). Returns a subscription effect for
    /// each value that changes what the connection had.
    public mutating func restoreClientConfigurations(_ values: [UInt16: UInt16], connection: UInt16) -> [Effect] {
        var effects: [Effect] = []
        for (h, stored) in values.sorted(by: { $0.key < $1.key }) {
            guard case let .clientConfiguration(valueHandle, props)? = database.attribute(h)?.role else { continue }
            var bits = stored & 3
            if !props.contains(.notify) { bits &= ~1 }
            if !props.contains(.indicate) { bits &= ~2 }
            guard bits != configurations[connection]?[h] ?? 0 else { continue }
            configurations[connection, default: [:]][h] = bits
            effects.append(.subscription(valueHandle: valueHandle, connection: connection, notify: bits & 1 != 0, indicate: bits & 2 != 0))
        }
        return effects
    }

    /// What a bond keeps of `connection` (`ClientRecord`).
    public func clientRecord(connection: UInt16) -> ClientRecord {
        ClientRecord(configurations: clientConfigurations(connection: connection), supportedFeatures: clientFeatures[connection] ?? 0,
                     awareOfHash: behind[connection] ?? databaseHashValue)
    }

    /// The Database Hash characteristic's value (§7.3), nil when the database has none.
    public var databaseHashValue: [UInt8]? {
        database.attributes.first { $0.type == BluetoothUUID(0x2B2A) }?.value
    }

    /// Puts back a bonded client's Client Supported Features (§7.2: persistent for a
    /// client with a trusted relationship); only defined bits, and none is cleared.
    public mutating func restoreClientFeatures(_ bits: UInt8, connection: UInt16) {
        clientFeatures[connection, default: 0] |= bits & ClientSupportedFeatures.all
    }

    /// The database changed while `connection`'s bonded client was away (it knew the
    /// database whose hash was `known`): with robust caching it is change-unaware until
    /// it confirms Service Changed or reads the Database Hash (§2.5.2.1). Returns the
    /// handles to tell it of in Service Changed: those changed since `known`
    /// (`changes(since:)`), or 0x0001–0xFFFF when that database is not among the
    /// changes kept (this server never served it, or it is older).
    @discardableResult
    public mutating func changedWhileAway(connection: UInt16, known: [UInt8]) -> ClosedRange<UInt16> {
        if known != databaseHashValue { behind[connection] = known }
        if (clientFeatures[connection] ?? 0) & ClientSupportedFeatures.robustCaching != 0 { becameChangeUnaware(connection) }
        return changes(since: known) ?? 0x0001...0xFFFF
    }

    /// The handles the changes since the database whose hash is `hash` touched, as one
    /// range (Service Changed carries one); nil when that database is the current one
    /// or not among the last `changesKept` changes. A hash the database had more than
    /// once counts from its latest time (the layout was the same).
    public func changes(since hash: [UInt8]) -> ClosedRange<UInt16>? {
        var covered: ClosedRange<UInt16>?
        for change in changeLog.reversed() {
            covered = covered.map { Swift.min($0.lowerBound, change.range.lowerBound)...Swift.max($0.upperBound, change.range.upperBound) } ?? change.range
            if change.before == hash { return covered }
        }
        return nil
    }

    private mutating func becameChangeUnaware(_ connection: UInt16) {
        changeUnaware.insert(connection)
        // Database Out Of Sync is sent again after a new change (§2.5.2.1).
        outOfSyncSent.remove(connection)
        hashRead.remove(connection)
    }

    /// Forget what a connection set (it went away; a bond keeps its CCCD values, put
    /// back with `restoreClientConfigurations`).
    public mutating func disconnected(_ connection: UInt16) {
        configurations[connection] = nil
        prepared[connection] = nil
        clientFeatures[connection] = nil
        becameChangeAware(connection)
        signing[connection] = nil
    }

    /// The key `connection`'s Signed Write Commands are verified with (its bond's CSRK
    /// and last SignCounter); nil: they are ignored.
    public mutating func setSigningKey(_ key: SigningKey?, connection: UInt16) { signing[connection] = key }

    public func signingKey(connection: UInt16) -> SigningKey? { signing[connection] }

    /// The database changed over `range` (already applied to `database`): the Database
    /// Hash is computed again, the change is logged, each of `connections` not yet
    /// behind now knows an older database, and every connection with robust caching
    /// becomes change-unaware.
    public mutating func databaseChanged(_ range: ClosedRange<UInt16>, connections: [UInt16]) {
        let before = databaseHashValue
        if let h = database.attributes.first(where: { $0.type == GATTCharacteristicType.databaseHash })?.handle {
            try? database.refreshDatabaseHash(at: h)
        }
        if let before, before != databaseHashValue {
            changeLog.append((before, range))
            if changeLog.count > Self.changesKept { changeLog.removeFirst(changeLog.count - Self.changesKept) }
            for c in connections where behind[c] == nil { behind[c] = before }
        }
        for (c, f) in clientFeatures where f & ClientSupportedFeatures.robustCaching != 0 { becameChangeUnaware(c) }
    }

    /// `connection` confirmed a Service Changed indication sent while the Database Hash
    /// was `hash`: it has taken in the changes up to that database. When that is the
    /// current one, a client on one ATT bearer is change-aware again; one with enhanced
    /// bearers (`singleBearer` false) that caches robustly stays change-unaware until
    /// it reads the Database Hash (§2.5.2.1), and its record keeps the older hash.
    /// Returns whether the client's record changed.
    public mutating func confirmedServiceChanged(connection: UInt16, hash: [UInt8]?, singleBearer: Bool) -> Bool {
        guard let hash, hash != databaseHashValue else {
            guard singleBearer || !changeUnaware.contains(connection) else { return false }
            let changed = behind[connection] != nil || changeUnaware.contains(connection)
            becameChangeAware(connection)
            return changed
        }
        // A later change went out after it: it knows the database of `hash` so far.
        guard behind[connection] != nil, behind[connection] != hash, singleBearer || !changeUnaware.contains(connection) else { return false }
        behind[connection] = hash
        return true
    }

    /// The client confirmed Service Changed, or read the Database Hash: it is change-aware again.
    public mutating func becameChangeAware(_ connection: UInt16) {
        changeUnaware.remove(connection)
        outOfSyncSent.remove(connection)
        hashRead.remove(connection)
        behind[connection] = nil
    }

    public func isChangeAware(_ connection: UInt16) -> Bool { changeUnaware.isEmpty || !changeUnaware.contains(connection) }

    /// What `connection` has written to Client Supported Features (§7.2; bits only ever set).
    public func clientSupportedFeatures(connection: UInt16) -> UInt8 { clientFeatures[connection] ?? 0 }

    /// Notifications of `values` for a client that takes Multiple Handle Value
    /// Notifications (§4.10.2, Vol 3, Part F, §3.4.7.4): consecutive values packed into
    /// one PDU while they fit in ATT_MTU (at least two per PDU; a value that fits with
    /// no neighbour goes alone as a Handle Value Notification, truncated to ATT_MTU - 3).
    public static func packNotifications(_ values: [(handle: UInt16, value: [UInt8])], mtu: Int) -> [ATTPDU] {
        var out: [ATTPDU] = []
        var batch: [ATTPDU.HandleValue] = []
        var size = 1
        func flush() {
            if batch.count == 1 { out.append(.handleValueNotification(handle: batch[0].handle, value: Array(batch[0].value.prefix(mtu - 3)))) }
            if batch.count > 1 { out.append(.multipleHandleValueNotification(batch)) }
            batch = []
            size = 1
        }
        for (h, v) in values {
            let entry = 4 + v.count
            if size + entry > mtu { flush() }
            batch.append(ATTPDU.HandleValue(handle: h, value: v))
            size += entry
            if size > mtu { flush() }
        }
        flush()
        return out
    }

    /// Values an application answering reads itself gave for this request, by handle:
    /// the whole value, or the ATT error it refused the read with.
    public typealias SuppliedValues = [UInt16: Result<[UInt8], ATTErrorCode>]

    /// Answers one request or command. Commands get no response. `supplied` stands in
    /// for the stored value of the attributes it names (Read By Type, Read Multiple and
    /// Read Multiple Variable read them as they read any other; a refusal answers as a
    /// permission check would).
    ///
    /// A change-unaware client (robust caching, §2.5.2.1) has its commands ignored and
    /// gets Database Out Of Sync for a request at an attribute handle or list of handles
    /// (and for Read By Type of other than «Include» or «Characteristic» over less than
    /// 0x0001–0xFFFF); discovery over ranges is answered. It becomes change-aware at its
    /// next request after it read the Database Hash or, on `singleBearer`, after it was
    /// sent Database Out Of Sync (which goes once, not to every request); until then
    /// every such request of a client with enhanced bearers gets it.
    public mutating func handle(_ pdu: ATTPDU, connection: UInt16, mtu: Int, security: LinkSecurity = LinkSecurity(),
                                supplied: SuppliedValues = [:], singleBearer: Bool = true) -> (response: ATTPDU?, effects: [Effect]) {
        guard changeUnaware.contains(connection) else {
            let (response, effects) = answer(pdu, connection: connection, mtu: mtu, security: security, supplied: supplied)
            // A client behind a change that reads the Database Hash knows the database now.
            guard !behind.isEmpty, behind[connection] != nil, readsDatabaseHash(pdu), response?.opcode != .errorResponse else { return (response, effects) }
            behind[connection] = nil
            return (response, effects + [.clientRecordChanged(connection: connection)])
        }
        switch pdu.opcode.kind {
        case .command: return (nil, [])
        case .request: break
        default: return answer(pdu, connection: connection, mtu: mtu, security: security, supplied: supplied)
        }
        if hashRead.contains(connection) || (singleBearer && outOfSyncSent.contains(connection)) {
            becameChangeAware(connection)
            let (response, effects) = answer(pdu, connection: connection, mtu: mtu, security: security, supplied: supplied)
            return (response, [.clientRecordChanged(connection: connection)] + effects)
        }
        if readsDatabaseHash(pdu) {
            hashRead.insert(connection)
        } else if Self.asksAtHandles(pdu) {
            outOfSyncSent.insert(connection)
            return (.errorResponse(request: pdu.opcode, handle: 0, error: .databaseOutOfSync), [])
        }
        return answer(pdu, connection: connection, mtu: mtu, security: security, supplied: supplied)
    }

    /// Whether `pdu` reads the Database Hash characteristic (by handle or by type).
    private func readsDatabaseHash(_ pdu: ATTPDU) -> Bool {
        switch pdu {
        case let .readByTypeRequest(_, _, type): return type == BluetoothUUID(0x2B2A)
        case let .readRequest(h): return h == database.attributes.first { $0.type == BluetoothUUID(0x2B2A) }?.handle
        default: return false
        }
    }

    /// The requests §2.5.2.1 answers with Database Out Of Sync for a change-unaware
    /// client: an operation at an attribute handle or list of handles, and Read By Type
    /// of other than «Include» or «Characteristic» over less than the whole range.
    static func asksAtHandles(_ pdu: ATTPDU) -> Bool {
        switch pdu {
        case .readRequest, .readBlobRequest, .readMultipleRequest, .readMultipleVariableRequest, .writeRequest, .prepareWriteRequest:
            return true
        case let .readByTypeRequest(start, end, type):
            return type != BluetoothUUID(0x2802) && type != BluetoothUUID(0x2803) && !(start == 0x0001 && end == 0xFFFF)
        default:
            return false
        }
    }

    /// `handle` for a change-aware client.
    private mutating func answer(_ pdu: ATTPDU, connection: UInt16, mtu: Int, security: LinkSecurity,
                                 supplied: SuppliedValues) -> (response: ATTPDU?, effects: [Effect]) {
        func error(_ code: ATTErrorCode, _ handle: UInt16) -> (ATTPDU?, [Effect]) {
            (.errorResponse(request: pdu.opcode, handle: handle, error: code), [])
        }
        func range(_ s: UInt16, _ e: UInt16) -> ClosedRange<UInt16>? { s == 0 || s > e ? nil : s...e }
        switch pdu {
        case let .findInformationRequest(s, e):
            guard let r = range(s, e) else { return error(.invalidHandle, s) }
            let attrs = database.attributes(in: r)
            guard let first = attrs.first else { return error(.attributeNotFound, s) }
            let wide = first.type.uint16 == nil
            let entry = wide ? 18 : 4
            var list: [ATTPDU.HandleUUID] = []
            for a in attrs where (a.type.uint16 == nil) == wide {
                guard 2 + (list.count + 1) * entry <= mtu else { break }
                list.append(.init(handle: a.handle, uuid: a.type))
            }
            return (.findInformationResponse(list), [])
        case let .findByTypeValueRequest(s, e, type, value):
            guard let r = range(s, e) else { return error(.invalidHandle, s) }
            var list: [ATTPDU.HandleRange] = []
            for a in database.attributes(in: r) where a.type == BluetoothUUID(type) && a.value == value {
                guard 1 + (list.count + 1) * 4 <= mtu else { break }
                var end = a.handle
                if case let .serviceDeclaration(e) = a.role { end = e }
                list.append(.init(found: a.handle, groupEnd: end))
            }
            return list.isEmpty ? error(.attributeNotFound, s) : (.findByTypeValueResponse(list), [])
        case let .readByTypeRequest(s, e, type):
            guard let r = range(s, e) else { return error(.invalidHandle, s) }
            var list: [ATTPDU.HandleValue] = []
            var length: Int?
            for a in database.attributes(in: r) where a.type == type {
                if let code = readDenied(a, security) ?? supplied[a.handle]?.refusal {
                    if list.isEmpty { return error(code, a.handle) }
                    break
                }
                let v = Array(value(of: a, connection: connection, supplied).prefix(Swift.min(mtu - 4, 253)))
                if let length, v.count != length { break }
                guard 2 + (list.count + 1) * (2 + v.count) <= mtu else { break }
                length = v.count
                list.append(.init(handle: a.handle, value: v))
            }
            return list.isEmpty ? error(.attributeNotFound, s) : (.readByTypeResponse(list), [])
        case let .readByGroupTypeRequest(s, e, type):
            guard let r = range(s, e) else { return error(.invalidHandle, s) }
            guard type == GATTType.primaryService || type == GATTType.secondaryService else { return error(.unsupportedGroupType, s) }
            var list: [ATTPDU.GroupValue] = []
            var length: Int?
            for a in database.attributes(in: r) where a.type == type {
                guard case let .serviceDeclaration(end) = a.role else { continue }
                let v = Array(a.value.prefix(Swift.min(mtu - 6, 251)))
                if let length, v.count != length { break }
                guard 2 + (list.count + 1) * (4 + v.count) <= mtu else { break }
                length = v.count
                list.append(.init(handle: a.handle, groupEnd: end, value: v))
            }
            return list.isEmpty ? error(.attributeNotFound, s) : (.readByGroupTypeResponse(list), [])
        case let .readRequest(h):
            guard let a = database.attribute(h) else { return error(.invalidHandle, h) }
            if let code = readDenied(a, security) { return error(code, h) }
            return (.readResponse(value: Array(value(of: a, connection: connection).prefix(mtu - 1))), [])
        case let .readBlobRequest(h, offset):
            guard let a = database.attribute(h) else { return error(.invalidHandle, h) }
            if let code = readDenied(a, security) { return error(code, h) }
            let v = value(of: a, connection: connection)
            guard Int(offset) <= v.count else { return error(.invalidOffset, h) }
            return (.readBlobResponse(value: Array(v[Int(offset)...].prefix(mtu - 1))), [])
        case let .readMultipleRequest(handles), let .readMultipleVariableRequest(handles):
            var values: [[UInt8]] = []
            for h in handles {
                guard let a = database.attribute(h) else { return error(.invalidHandle, h) }
                if let code = readDenied(a, security) ?? supplied[h]?.refusal { return error(code, h) }
                values.append(value(of: a, connection: connection, supplied))
            }
            if case .readMultipleRequest = pdu { return (.readMultipleResponse(values: Array(values.joined().prefix(mtu - 1))), []) }
            // §3.4.4.12: each value after its whole length; the list is cut at ATT_MTU - 1
            // octets (the last value short of its length; a lone octet of a length that
            // would end it is left out: it tells the client nothing).
            var out: [ATTPDU.LengthValue] = [], room = mtu - 1
            for v in values where room >= 2 {
                room -= 2
                out.append(ATTPDU.LengthValue(length: UInt16(clamping: v.count), value: Array(v.prefix(room))))
                room -= Swift.min(room, v.count)
            }
            return (.readMultipleVariableResponse(values: out), [])
        case let .writeRequest(h, v):
            if let code = writeDenied(h, v, security, connection: connection) { return error(code, h) }
            return (.writeResponse, write(h, v, connection: connection))
        case let .writeCommand(h, v):
            guard writeDenied(h, v, security, connection: connection) == nil,
                  case .characteristicValue(let p)? = database.attribute(h)?.role, p.contains(.writeWithoutResponse) else { return (nil, []) }
            return (nil, write(h, v, connection: connection))
        case let .signedWriteCommand(h, v, signature):
            return signedWrite(h, v, signature: signature, connection: connection, security: security)
        case let .prepareWriteRequest(h, offset, v):
            if let code = writeDenied(h, nil, security, connection: connection) { return error(code, h) }
            guard (prepared[connection]?.count ?? 0) < prepareQueueLimit else { return error(.prepareQueueFull, h) }
            prepared[connection, default: []].append((h, Int(offset), v))
            return (.prepareWriteResponse(handle: h, offset: offset, value: v), [])
        case let .executeWriteRequest(flags):
            // Flags other than 0x00 and 0x01 are reserved (§3.4.6.3). The decoder refuses
            // them, so the bearer answers Invalid PDU and the queue stays; a PDU built in
            // code gets the same, not a cancel.
            guard flags <= 1 else { return error(.invalidPDU, 0) }
            guard flags == 1 else {
                prepared[connection] = nil
                return (.executeWriteResponse, [])
            }
            switch takePreparedWrites(connection: connection) {
            case let .failure(refusal): return error(refusal.error, refusal.handle)
            case let .success(writes):
                var effects: [Effect] = []
                for w in writes { effects += write(w.handle, w.value, connection: connection) }
                return (.executeWriteResponse, effects)
            }
        case .exchangeMTURequest:
            return (nil, [])  // answered by the bearer
        default:
            if pdu.opcode.kind == .request { return error(.requestNotSupported, 0) }
            return (nil, [])
        }
    }

    /// A Signed Write Command (§3.4.5.4; Vol 3, Part C, §10.4.2): verified with the
    /// connection's CSRK, its SignCounter above the last one accepted, then written as a
    /// Write Command to a characteristic with the Authenticated Signed Writes property,
    /// the permissions judged by what the signature proves (or the link's encryption,
    /// when it proves more). Anything else is ignored: a command has no error response.
    private mutating func signedWrite(_ h: UInt16, _ v: [UInt8], signature: [UInt8], connection: UInt16, security: LinkSecurity) -> (response: ATTPDU?, effects: [Effect]) {
        let message = [ATTOpcode.signedWriteCommand.rawValue, UInt8(truncatingIfNeeded: h), UInt8(truncatingIfNeeded: h >> 8)] + v + signature
        guard var key = signing[connection],
              let counter = SecurityToolbox.verifySignature(csrk: key.csrk, signedMessage: message),
              key.counter.map({ counter > $0 }) ?? true else { return (nil, []) }
        key.counter = counter
        signing[connection] = key
        var proven = key.security
        proven.encrypted = true
        proven.authorized = security.authorized
        if security.encrypted {
            proven.authenticated = proven.authenticated || security.authenticated
            proven.keySize = Swift.max(proven.keySize, security.keySize)
        }
        let consumed = Effect.signCounter(connection: connection, counter: counter)
        guard writeDenied(h, v, proven, connection: connection) == nil,
              case .characteristicValue(let p)? = database.attribute(h)?.role, p.contains(.authenticatedSignedWrites) else { return (nil, [consumed]) }
        return (nil, [consumed] + write(h, v, connection: connection))
    }

    /// The handles `connection` has prepared writes for, in the order first prepared.
    public func preparedHandles(connection: UInt16) -> [UInt16] {
        var seen: Set<UInt16> = []
        return (prepared[connection] ?? []).map(\.handle).filter { seen.insert($0).inserted }
    }

    /// Why an Execute Write Request is refused: the code and the handle it names.
    public struct PreparedWriteRefusal: Error, Hashable, Sendable {
        public var error: ATTErrorCode
        public var handle: UInt16
    }

    /// Empties `connection`'s prepared-write queue and builds each attribute's new value
    /// from its pieces, in the order first prepared, checking every offset and each whole
    /// value's length (as a Write Request's, a CCCD's 2 octets included) before any is
    /// written (§3.4.6.3). Nothing is written here: `commitWrite` writes each value.
    public mutating func takePreparedWrites(connection: UInt16) -> Result<[(handle: UInt16, value: [UInt8])], PreparedWriteRefusal> {
        let queue = prepared.removeValue(forKey: connection) ?? []
        var staged: [UInt16: [UInt8]] = [:]
        var order: [UInt16] = []
        for item in queue {
            var v = staged[item.handle] ?? database.attribute(item.handle).map { value(of: $0, connection: connection) } ?? []
            guard item.offset <= v.count else { return .failure(PreparedWriteRefusal(error: .invalidOffset, handle: item.handle)) }
            // Each piece sets the value from its offset on: a long write leaves exactly what was written.
            v = Array(v[..<item.offset]) + item.value
            if staged[item.handle] == nil { order.append(item.handle) }
            staged[item.handle] = v
        }
        var writes: [(handle: UInt16, value: [UInt8])] = []
        for h in order {
            let v = staged[h] ?? []
            guard let a = database.attribute(h) else { return .failure(PreparedWriteRefusal(error: .invalidHandle, handle: h)) }
            if let code = valueDenied(a, v, connection: connection) { return .failure(PreparedWriteRefusal(error: code, handle: h)) }
            writes.append((h, v))
        }
        return .success(writes)
    }

    /// Writes one value `takePreparedWrites` built (its checks already made).
    public mutating func commitWrite(_ value: [UInt8], at handle: UInt16, connection: UInt16) -> [Effect] {
        write(handle, value, connection: connection)
    }

    private func value(of a: Attribute, connection: UInt16, _ supplied: SuppliedValues = [:]) -> [UInt8] {
        if case let .success(v)? = supplied[a.handle] { return v }
        if a.type == BluetoothUUID(0x2B29) { return [clientFeatures[connection] ?? 0] }
        if case .clientConfiguration = a.role {
            let v = configurations[connection]?[a.handle] ?? 0
            return [UInt8(v & 0xFF), UInt8(v >> 8)]
        }
        return a.value
    }

    func readDenied(_ a: Attribute, _ s: LinkSecurity) -> ATTErrorCode? {
        let p = a.permissions
        guard !p.isDisjoint(with: [.read, .readEncrypted, .readAuthenticated, .readAuthorized]) else { return .readNotPermitted }
        return securityDenied(encryption: p.contains(.readEncrypted), authentication: p.contains(.readAuthenticated),
                              authorization: p.contains(.readAuthorized), s)
    }

    /// Why a link with `s` is refused an access that needs encryption, authentication
    /// (an MITM-protected key) or authorization, as Vol 3, Part C, §10.3.1 orders it: an
    /// unencrypted link first, with Insufficient Encryption when the peer has a stored
    /// key to encrypt with and Insufficient Authentication when it must pair (NimBLE
    /// answers the same); then a key that is not authenticated, one too short, and
    /// authorization.
    private func securityDenied(encryption: Bool, authentication: Bool, authorization: Bool, _ s: LinkSecurity) -> ATTErrorCode? {
        if encryption || authentication {
            guard s.encrypted else { return s.keyAvailable ? .insufficientEncryption : .insufficientAuthentication }
            if authentication, !s.authenticated { return .insufficientAuthentication }
            if s.keySize < minimumKeySize { return .encryptionKeySizeTooShort }
        }
        if authorization, !s.authorized { return .insufficientAuthorization }
        return nil
    }

    /// Whether the attribute at `handle` asks for authentication (not only encryption)
    /// for what `pdu` does to it: the level a Security Request for a refusal of `pdu`
    /// asks for.
    public func needsAuthentication(_ pdu: ATTPDU, at handle: UInt16) -> Bool {
        guard let p = database.attribute(handle)?.permissions else { return false }
        switch pdu {
        case .writeRequest, .writeCommand, .prepareWriteRequest, .executeWriteRequest, .signedWriteCommand:
            return p.contains(.writeAuthenticated)
        default:
            return p.contains(.readAuthenticated)
        }
    }

    /// Why a write of `value` to `h` by `connection` is refused on a link with `s`, if it is.
    /// With `value` nil only the handle and the permissions are judged: a Prepare Write
    /// Request's value is validated when the queue is executed (§3.4.6.1).
    func writeDenied(_ h: UInt16, _ value: [UInt8]?, _ s: LinkSecurity, connection: UInt16) -> ATTErrorCode? {
        guard let a = database.attribute(h) else { return .invalidHandle }
        let p = a.permissions
        guard !p.isDisjoint(with: [.write, .writeEncrypted, .writeAuthenticated, .writeAuthorized]) else { return .writeNotPermitted }
        if let denied = securityDenied(encryption: p.contains(.writeEncrypted), authentication: p.contains(.writeAuthenticated),
                                       authorization: p.contains(.writeAuthorized), s) { return denied }
        return value.flatMap { valueDenied(a, $0, connection: connection) }
    }

    /// Why `a` cannot hold `value` written by `connection`, if it cannot:
    /// - Invalid Attribute Value Length: a Client Characteristic Configuration is 2
    ///   octets, Client Supported Features 1, any other at most its maximum;
    /// - Value Not Allowed: Client Supported Features without a bit this client set
    ///   before ("the client shall not clear any bits it has set", §7.2; BlueZ answers
    ///   the same);
    /// - Client Characteristic Configuration Descriptor Improperly Configured (0xFD,
    ///   Core Specification Supplement Part B §1.2), as BlueZ answers it: a CCCD value
    ///   asking for notifications or indications the characteristic's properties do not
    ///   offer (§3.3.1.1: only a property's bit permits its action). The bits above
    ///   them are reserved for future use and ignored, as reserved bits are on receipt.
    private func valueDenied(_ a: Attribute, _ value: [UInt8], connection: UInt16) -> ATTErrorCode? {
        if case let .clientConfiguration(_, props) = a.role {
            guard value.count == 2 else { return .invalidAttributeValueLength }
            if value[0] & 1 != 0, !props.contains(.notify) { return .cccdImproperlyConfigured }
            if value[0] & 2 != 0, !props.contains(.indicate) { return .cccdImproperlyConfigured }
            return nil
        }
        if a.type == BluetoothUUID(0x2B29) {
            guard value.count == 1 else { return .invalidAttributeValueLength }
            let set = clientFeatures[connection] ?? 0
            return set & ~value[0] & ClientSupportedFeatures.all != 0 ? .valueNotAllowed : nil
        }
        if value.count > a.maximumLength { return .invalidAttributeValueLength }
        return nil
    }

    private mutating func write(_ h: UInt16, _ v: [UInt8], connection: UInt16) -> [Effect] {
        guard let a = database.attribute(h) else { return [] }
        if a.type == BluetoothUUID(0x2B29) {
            // Client Supported Features are per client; bits once set stay set (§7.2).
            let before = clientFeatures[connection] ?? 0
            clientFeatures[connection] = before | (v.first ?? 0) & ClientSupportedFeatures.all
            return clientFeatures[connection] == before ? [] : [.clientRecordChanged(connection: connection)]
        }
        if case let .clientConfiguration(valueHandle, props) = a.role {
            // `valueDenied` refused bits the properties do not offer; those above are
            // reserved and ignored. (Masked here too for a value no request checked.)
            var bits = v.count >= 2 ? UInt16(v[0]) | UInt16(v[1]) << 8 : 0
            if !props.contains(.notify) { bits &= ~1 }
            if !props.contains(.indicate) { bits &= ~2 }
            configurations[connection, default: [:]][h] = bits & 3
            return [.subscription(valueHandle: valueHandle, connection: connection, notify: bits & 1 != 0, indicate: bits & 2 != 0)]
        }
        database.setValue(v, at: h)
        return [.written(handle: h, value: v, connection: connection)]
    }
}

extension Result where Failure == ATTErrorCode {
    /// The error a refused result carries; nil for a value.
    var refusal: ATTErrorCode? {
        if case let .failure(code) = self { return code }
        return nil
    }
}
