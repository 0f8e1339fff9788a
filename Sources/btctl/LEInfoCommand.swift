// btctl leinfo: connect to a peer and print what its controller says of itself, as
// BlueZ's `hcitool leinfo` does: its LE features (LE Read Remote Features) and its
// link-layer version and manufacturer (Read Remote Version Information); and the
// link's connection parameters, PHY and data length.

import ArgumentParser
import BLE
import HCI
import Snoop

struct LEInfo: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "leinfo",
        abstract: "Connect to a peer and print its LE features, Bluetooth version and manufacturer (hcitool leinfo), and the link's parameters, PHY and data length.")

    @OptionGroup var options: ControllerOptions
    @OptionGroup var peer: PeerOptions

    func run() async throws {
        let (session, writer) = try await PeerSession.open(options, peer)
        defer { writer?.close() }
        let c = session.peripheral.connection
        let features: LEFeatures?, version: RemoteVersion?, link: Link
        do {
            features = try await session.peripheral.remoteFeatures()
            version = try await session.peripheral.remoteVersion()
            // A controller with LE 1M only has no LE Read PHY.
            link = Link(parameters: try await session.peripheral.parameters(), phy: try? await session.peripheral.phy(),
                        dataLength: try await session.peripheral.dataLength())
        } catch {
            await session.close()
            throw CLIError("cannot read the peer's features and version: \(error)")
        }
        await session.close()
        let address = DeviceAddress(c.peer, type: c.peerType).description
        if options.json {
            var o: [(String, JSONValue)] = [("event", .string("peer")), ("address", .string(address)), ("handle", .int(Int(c.handle)))]
            if let v = version {
                o += [("version", .int(Int(v.version))), ("version_name", .string(CoreVersion.name(v.version))),
                      ("manufacturer", .int(Int(v.companyIdentifier))), ("manufacturer_name", .string(CompanyIdentifier.name(v.companyIdentifier))),
                      ("subversion", .int(Int(v.subversion)))]
            }
            if let f = features {
                o += [("le_features", .array(f.names.map { .string($0) })), ("le_features_mask", .int(Int(truncatingIfNeeded: f.rawValue)))]
            }
            let p = link.parameters
            o += [("interval", .int(Int(p.interval))), ("latency", .int(Int(p.latency))), ("supervision_timeout", .int(Int(p.supervisionTimeout))),
                  ("tx_octets", .int(link.dataLength.maxTxOctets)), ("rx_octets", .int(link.dataLength.maxRxOctets))]
            if let phy = link.phy { o += [("phy_tx", .string(phy.tx.description)), ("phy_rx", .string(phy.rx.description))] }
            emit(.object(o))
        } else {
            print(Self.text(address: address, handle: c.handle, features: features, version: version, link: link))
        }
        if let e = writer?.error { throw CLIError("the btsnoop recording failed: \(e)") }
    }

    /// What the link is now.
    struct Link {
        var parameters: ConnectionParameters
        var phy: LinkPHY?
        var dataLength: DataLength
    }

    static func text(address: String, handle: UInt16, features: LEFeatures?, version: RemoteVersion?, link: Link) -> String {
        var lines = ["Peer          \(address) (handle \(handle))",
                     "Link          \(link.parameters)",
                     "PHY           \(link.phy?.description ?? "LE 1M (the controller has no other)")",
                     "Data length   \(link.dataLength.maxTxOctets) octets out, \(link.dataLength.maxRxOctets) in"]
        if let v = version {
            lines.append("LL version    \(CoreVersion.name(v.version)) (\(v.version)), subversion 0x\(hex4(v.subversion))")
            lines.append("Manufacturer  \(CompanyIdentifier.name(v.companyIdentifier)) (\(v.companyIdentifier))")
        } else {
            lines.append("LL version    (no answer to Read Remote Version Information)")
        }
        if let f = features {
            lines.append("LE features   0x\(String(f.rawValue, radix: 16, uppercase: false))")
            lines += f.names.map { "  " + $0 }
        } else {
            lines.append("LE features   (no answer to LE Read Remote Features)")
        }
        return lines.joined(separator: "\n")
    }
}
