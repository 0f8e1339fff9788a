// What a bond keeps about one peer (Vol 3, Part H, §2.4.1 and Part C, §9.4): its keys,
// its addresses, what our GATT server holds for it as a client and its GATT layout as
// our client discovered it. Values only, no I/O (`BondStore.swift` keeps them).

import HCI

/// What a bond keeps about one peer.
public struct Bond: Hashable, Sendable, Codable, CustomStringConvertible {
    /// The peer's identity address when it distributed one, else the address the
    /// link was made with.
    public var address: BluetoothAddress
    public var addressType: AddressType
    public var keys: PairingKeys
    /// For our GATT server: the client's CCCD values by handle, restored when it reconnects.
    public var clientConfigurations: [UInt16: UInt16]
    /// For our GATT server: what the client wrote to Client Supported Features (Vol 3,
    /// Part G, §7.2: kept for a client with a trusted relationship); nil before any.
    public var clientSupportedFeatures: UInt8?
    /// For our GATT server: its Database Hash when the client was last change-aware
    /// (§2.5.2.1); another hash at its next connection means the database changed
    /// while it was away. Nil before one was kept.
    public var serverDatabaseHash: [UInt8]?
    /// For our GATT client: the peer's database as we last discovered it, with its
    /// Database Hash then; reused at reconnection while the hash is unchanged.
    public var database: CachedDatabase?
    /// Other addresses the peer bonded from (a static random address next to the
    /// public identity it distributed); its private addresses resolve through the IRK.
    public var linkAddresses: [LinkAddress]
    /// Data signing (Vol 3, Part H, §2.4.5): the last SignCounter we signed a write to
    /// this peer with, under our CSRK (`keys.localCSRK`); nil before the first.
    public var signCounter: UInt32?
    /// The last SignCounter accepted from this peer under its CSRK (`keys.peerCSRK`);
    /// a signed write must carry a greater one. Nil before the first.
    public var peerSignCounter: UInt32?

    public struct LinkAddress: Hashable, Sendable, Codable {
        public var address: BluetoothAddress
        public var type: AddressType
        public init(address: BluetoothAddress, type: AddressType) {
            self.address = address
            self.type = type
        }
    }

    public init(address: BluetoothAddress, addressType: AddressType, keys: PairingKeys, linkAddresses: [LinkAddress] = [],
                clientConfigurations: [UInt16: UInt16] = [:], database: CachedDatabase? = nil) {
        self.address = address
        self.addressType = addressType
        self.keys = keys
        self.linkAddresses = linkAddresses
        self.clientConfigurations = clientConfigurations
        self.database = database
    }

    /// The security a link re-encrypted from this bond has.
    public var security: LinkSecurityState? { (keys.peerLTK ?? keys.localLTK)?.security }

    /// Address, type and which keys are held; never the keys.
    public var description: String {
        var held: [String] = []
        if keys.peerLTK != nil || keys.localLTK != nil { held.append("LTK") }
        if keys.peerIdentity != nil { held.append("IRK") }
        if keys.peerCSRK != nil { held.append("CSRK") }
        if keys.linkKey != nil { held.append("link key") }
        return "\(address) (\(addressType)) keys: \(held.joined(separator: ", "))\(security.map { ", \($0.level)" } ?? "")"
    }

    /// Whether `other` is stored in this bond's place: the same address and address
    /// type, what a store's `save` replaces (and what `BondLimit` counts once).
    public func isEntry(of other: Bond) -> Bool { address == other.address && addressType == other.addressType }

    /// Whether `address` is this bond's peer: its identity or link address, or a
    /// resolvable private address its IRK resolves.
    public func matches(_ address: BluetoothAddress, type: AddressType) -> Bool {
        if address == self.address && (type.rawValue & 1) == (addressType.rawValue & 1) { return true }
        if linkAddresses.contains(where: { $0.address == address && $0.type.rawValue & 1 == type.rawValue & 1 }) { return true }
        guard type.rawValue & 1 == 1, let irk = keys.peerIdentity?.irk else { return false }
        return ResolvablePrivateAddress.resolves(address, irk: irk)
    }
}

/// A GATT server's layout as a client discovered it (services, characteristics and
/// descriptors: handles, types, properties; no values), with the server's Database
/// Hash at that time (Vol 3, Part G, §7.3). A client that reads an unchanged hash at
/// reconnection may use the layout instead of discovering again (robust caching,
/// §2.5.2.1). UUIDs are kept in their text form.
public struct CachedDatabase: Hashable, Sendable, Codable {
    public struct Descriptor: Hashable, Sendable, Codable {
        public var uuid: String
        public var handle: UInt16
        public init(uuid: String, handle: UInt16) {
            self.uuid = uuid
            self.handle = handle
        }
    }
    public struct Characteristic: Hashable, Sendable, Codable {
        public var uuid: String
        public var declaration: UInt16
        public var value: UInt16
        public var properties: UInt8
        public var end: UInt16
        public var descriptors: [Descriptor]
        public init(uuid: String, declaration: UInt16, value: UInt16, properties: UInt8, end: UInt16, descriptors: [Descriptor]) {
            self.uuid = uuid
            self.declaration = declaration
            self.value = value
            self.properties = properties
            self.end = end
            self.descriptors = descriptors
        }
    }
    public struct Service: Hashable, Sendable, Codable {
        public var uuid: String
        public var start: UInt16
        public var end: UInt16
        public var primary: Bool
        public var characteristics: [Characteristic]
        public init(uuid: String, start: UInt16, end: UInt16, primary: Bool, characteristics: [Characteristic]) {
            self.uuid = uuid
            self.start = start
            self.end = end
            self.primary = primary
            self.characteristics = characteristics
        }
    }
    /// The 16-octet Database Hash, as read from the server.
    public var hash: [UInt8]
    public var services: [Service]
    public init(hash: [UInt8], services: [Service]) {
        self.hash = hash
        self.services = services
    }
}
