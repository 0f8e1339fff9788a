// btctl info: initialise the controller and print what it is and supports.
// btctl list: the kernel's adapters.

import ArgumentParser
import HCI
import Snoop
import Transports

struct Info: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Initialise the controller and print its address, versions, features and buffers.")

    @OptionGroup var options: ControllerOptions

    func run() async throws {
        let (controller, writer) = try await options.openController()
        defer { writer?.close() }
        let info: ControllerInfo
        do {
            // On the raw channel the kernel owns the adapter: do not reset it under its feet.
            var shared = false
            if case .spec(.hci(_, .raw)) = try options.transportChoice { shared = true }
            info = try await controller.initialize(reset: !shared)
        } catch {
            await controller.close()
            throw CLIError("initialising the controller on \(options.transportName) failed: \(error)")
        }
        await controller.close()
        if options.json {
            emit(Self.json(info))
        } else {
            print(Self.text(info))
        }
        if let e = writer?.error { throw CLIError("the btsnoop recording failed: \(e)") }
    }

    static func json(_ i: ControllerInfo) -> JSONValue {
        var o: [(String, JSONValue)] = [
            ("event", .string("controller")),
            ("address", .string(i.address.description)),
            ("hci_version", .int(Int(i.version.hciVersion))), ("hci_version_name", .string(CoreVersion.name(i.version.hciVersion))),
            ("hci_subversion", .int(Int(i.version.hciSubversion))),
            ("lmp_version", .int(Int(i.version.lmpVersion))), ("lmp_version_name", .string(CoreVersion.name(i.version.lmpVersion))),
            ("lmp_subversion", .int(Int(i.version.lmpSubversion))),
            ("manufacturer", .int(Int(i.version.companyIdentifier))),
            ("manufacturer_name", .string(CompanyIdentifier.name(i.version.companyIdentifier))),
            ("le_features", .array(i.leFeatures.names.map { .string($0) })),
            ("le_features_mask", .int(Int(truncatingIfNeeded: i.leFeatures.rawValue))),
            ("le_acl_data_packet_length", .int(i.leACLDataPacketLength)),
            ("le_acl_data_packets", .int(i.totalNumLEACLDataPackets)),
            ("supported_commands_count", .int(i.supportedCommands.count)),
            ("supported_commands", .array(i.supportedCommands.supportedNames.map { .string($0) })),
            ("skipped", .array(i.skipped.map { .object([("command", .string($0.opcode.description)), ("status", .string($0.status?.description ?? "not supported"))]) })),
        ]
        if let a = i.aclBuffers {
            o.append(("acl_data_packet_length", .int(Int(a.aclDataPacketLength))))
            o.append(("acl_data_packets", .int(Int(a.totalNumACLDataPackets))))
        }
        if let n = i.isoDataPacketLength, let c = i.totalNumISODataPackets {
            o.append(("iso_data_packet_length", .int(n)))
            o.append(("iso_data_packets", .int(c)))
        }
        if let m = i.maximumDataLength {
            o.append(("max_tx_octets", .int(Int(m.supportedMaxTxOctets))))
            o.append(("max_rx_octets", .int(Int(m.supportedMaxRxOctets))))
        }
        if let s = i.numberOfSupportedAdvertisingSets { o.append(("advertising_sets", .int(s))) }
        if let m = i.maximumAdvertisingDataLength { o.append(("max_advertising_data_length", .int(m))) }
        if let mask = i.leSupportedStates {
            let states = LESupportedStates(rawValue: mask)
            o.append(("le_states_mask", .int(Int(truncatingIfNeeded: mask))))
            o.append(("le_states", .array(states.claimedBits.map { .string(LESupportedStates.name(ofBit: $0) ?? "bit \($0)") })))
        }
        return .object(o)
    }

    static func text(_ i: ControllerInfo) -> String {
        var lines: [(String, String)] = [
            ("Address", i.address.description),
            ("HCI version", "\(CoreVersion.name(i.version.hciVersion)) (\(i.version.hciVersion)), revision 0x\(hex4(i.version.hciSubversion))"),
            ("LMP version", "\(CoreVersion.name(i.version.lmpVersion)) (\(i.version.lmpVersion)), subversion 0x\(hex4(i.version.lmpSubversion))"),
            ("Manufacturer", "\(CompanyIdentifier.name(i.version.companyIdentifier)) (\(i.version.companyIdentifier))"),
            ("LE ACL buffers", "\(i.totalNumLEACLDataPackets) × \(i.leACLDataPacketLength) bytes"),
        ]
        if let a = i.aclBuffers { lines.append(("ACL buffers", "\(a.totalNumACLDataPackets) × \(a.aclDataPacketLength) bytes")) }
        if let n = i.isoDataPacketLength, let c = i.totalNumISODataPackets { lines.append(("ISO buffers", "\(c) × \(n) bytes")) }
        if let m = i.maximumDataLength {
            lines.append(("Max data length", "tx \(m.supportedMaxTxOctets) bytes / \(m.supportedMaxTxTime) µs, rx \(m.supportedMaxRxOctets) bytes / \(m.supportedMaxRxTime) µs"))
        }
        if let s = i.numberOfSupportedAdvertisingSets { lines.append(("Advertising sets", "\(s)")) }
        if let m = i.maximumAdvertisingDataLength { lines.append(("Max adv data", "\(m) bytes")) }
        lines.append(("Commands", "\(i.supportedCommands.count) supported; of the LE host's set: \(i.supportedCommands.supportedNames.count) of \(SupportedCommands.bits.count)"))
        if let mask = i.leSupportedStates { lines.append(("LE states", LESupportedStates(rawValue: mask).summary)) }
        if !i.skipped.isEmpty {
            lines.append(("Skipped", i.skipped.map { "\($0.opcode) (\($0.status?.description ?? "not in Supported_Commands"))" }.joined(separator: "; ")))
        }
        let width = lines.map(\.0.count).max() ?? 0
        var out = lines.map { $0.0 + String(repeating: " ", count: width - $0.0.count) + "  " + $0.1 }
        out.append("LE features:")
        out += i.leFeatures.names.map { "  " + $0 }
        return out.joined(separator: "\n")
    }
}

struct List: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "List the kernel's Bluetooth adapters.")

    @Flag(help: "One JSON object per line on stdout.")
    var json = false

    func run() async throws {
        let adapters: [AdapterInfo]
        do { adapters = try BlueZ.adapters() } catch { throw CLIError("\(error)") }
        if adapters.isEmpty {
            note("the kernel has Bluetooth support but no adapters")
            return
        }
        for a in adapters {
            if json {
                emit(.object([("event", .string("adapter")), ("index", .int(Int(a.index))), ("name", .string(a.name)), ("address", .string(a.address.description)),
                              ("up", .bool(a.isUp)), ("bus", .string(a.busName)), ("acl_mtu", .int(Int(a.aclMTU))),
                              ("acl_packets", .int(Int(a.aclPackets)))]))
            } else {
                print("\(a.name)  \(a.address)  \(a.isUp ? "UP  " : "DOWN")  bus=\(a.busName)  acl=\(a.aclPackets)×\(a.aclMTU)")
            }
        }
    }
}
