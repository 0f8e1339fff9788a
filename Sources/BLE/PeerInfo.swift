// What a link's peer says of itself: its LE features (LE Read Remote Features,
// §7.8.21, the link layer's feature exchange) and its Bluetooth version and
// manufacturer (Read Remote Version Information, §7.1.23), as `hcitool leinfo` shows
// them and Bumble's `get_remote_le_features` reads them. Asked once per link and kept:
// neither changes while a link lasts.

import HCI

/// The peer's link-layer version (Read Remote Version Information Complete).
public struct RemoteVersion: Hashable, Sendable, CustomStringConvertible {
    /// The Core Specification version its link layer follows (Assigned Numbers: 13 is 5.4).
    public var version: UInt8
    /// Who made its controller (Company Identifiers).
    public var companyIdentifier: UInt16
    /// The manufacturer's own revision.
    public var subversion: UInt16

    public init(version: UInt8, companyIdentifier: UInt16, subversion: UInt16) {
        self.version = version
        self.companyIdentifier = companyIdentifier
        self.subversion = subversion
    }
    init(_ e: ReadRemoteVersionInformationComplete) {
        self.init(version: e.version, companyIdentifier: e.companyIdentifier, subversion: e.subversion)
    }
    public var description: String {
        "Bluetooth \(CoreVersion.name(version)) (0x\(hex2(version))), \(CompanyIdentifier.name(companyIdentifier)), subversion 0x\(hex4(subversion))"
    }
}

extension BluetoothHost {
    /// The LE features link `c`'s peer has (LE Read Remote Features; Vol 6, Part B,
    /// §4.6): whether it does LE 2M, data length extension, connection parameter
    /// requests, and so on. Asked once per link, then kept. Nil when the controller
    /// or the peer does not answer it (Unknown HCI Command, Unsupported Remote
    /// Feature, or nothing within `limit`). The link's end ends the wait at once with
    /// `BLEError.disconnected`.
    public func remoteFeatures(of c: Connection, within limit: Duration = .seconds(10)) async throws -> LEFeatures? {
        if let known = links.remoteFeatures[c.id] { return known }
        let f = try await askController(c, within: limit, LEReadRemoteFeatures(connectionHandle: c.handle), status: \.status) { e in
            if case let .remoteFeatures(f) = e { return f } else { return nil }
        }
        return f.map { LEFeatures(rawValue: $0.leFeatures) }
    }

    /// The Bluetooth version and manufacturer of link `c`'s peer (Read Remote Version
    /// Information). Asked once per link, then kept; nil when no answer comes within
    /// `limit` or the controller does not have the command. The link's end ends the
    /// wait at once with `BLEError.disconnected`.
    public func remoteVersion(of c: Connection, within limit: Duration = .seconds(10)) async throws -> RemoteVersion? {
        if let known = links.remoteVersions[c.id] { return known }
        let v = try await askController(c, within: limit, ReadRemoteVersionInformation(connectionHandle: c.handle), status: \.status) { e in
            if case let .remoteVersion(v) = e { return v } else { return nil }
        }
        return v.map(RemoteVersion.init)
    }
}

extension RemotePeripheral {
    /// See `BluetoothHost.remoteFeatures(of:within:)`.
    public func remoteFeatures(within limit: Duration = .seconds(10)) async throws -> LEFeatures? {
        try await host.remoteFeatures(of: connection, within: limit)
    }

    /// See `BluetoothHost.remoteVersion(of:within:)`.
    public func remoteVersion(within limit: Duration = .seconds(10)) async throws -> RemoteVersion? {
        try await host.remoteVersion(of: connection, within: limit)
    }
}
