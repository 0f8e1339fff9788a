// The virtual controller under a host that sends it anything, seeded: `btctl radio`
// serves it over TCP to any host (Bumble, a daemon under test, a fuzzer), so what a
// host sends comes from outside the process. Commands it implements with random
// parameters (at their own length or any other), commands it does not implement
// (vendor ones too), ACL data for handles that exist or not, all sent without waiting
// for command credits. Every command must get exactly one Command Complete or Command
// Status naming it, in the order sent (Vol 4, Part E, §4.4: the controller answers
// each; a malformed one with Invalid HCI Command Parameters, an unknown one with
// Unknown HCI Command), nothing may trap, and afterwards Reset and Read BD_ADDR answer
// as on a fresh controller. The host first connects to a second controller on the
// radio, so the commands that name a link (and the ACL data) meet a live one.

import BLETesting
import HCI
import Testing
@testable import VirtualHCI

@Suite(.timeLimit(.minutes(3)))
struct HostileHostTests {
    /// Parameter lengths of fixed-length commands (Vol 4, Part E, §7), so that half the
    /// random commands get past the length check to their values.
    static let lengths: [HCIOpcode: Int] = [
        .reset: 0, .setEventMask: 8, .setEventMaskPage2: 8, .leSetEventMask: 8, .leSetRandomAddress: 6,
        .leSetAdvertisingParameters: 15, .leSetAdvertisingData: 32, .leSetScanResponseData: 32, .leSetAdvertisingEnable: 1,
        .leSetScanParameters: 7, .leSetScanEnable: 2, .leCreateConnection: 25, .leCreateConnectionCancel: 0, .disconnect: 3,
        .leConnectionUpdate: 14, .readRSSI: 2, .leReadRemoteFeatures: 2, .readRemoteVersionInformation: 2, .leSetDataLength: 6,
        .leWriteSuggestedDefaultDataLength: 4, .leAddDeviceToFilterAcceptList: 7, .leRemoveDeviceFromFilterAcceptList: 7,
        .leEnableEncryption: 28, .leLongTermKeyRequestReply: 18, .leLongTermKeyRequestNegativeReply: 2, .leEncrypt: 32,
        .leSetPHY: 7, .leSetDefaultPHY: 3, .leReadPHY: 2, .leSetAdvertisingSetRandomAddress: 7,
        .leSetExtendedAdvertisingParameters: 25, .leSetExtendedScanEnable: 6, .leRemoveAdvertisingSet: 1,
        .leSetPeriodicAdvertisingParameters: 7, .leSetPeriodicAdvertisingEnable: 2, .lePeriodicAdvertisingCreateSync: 14,
        .lePeriodicAdvertisingTerminateSync: 2, .leAddDeviceToPeriodicAdvertiserList: 8, .leRemoveDeviceFromPeriodicAdvertiserList: 8,
    ]

    /// Commands whose first parameter is a Connection_Handle.
    static let onALink: Set<HCIOpcode> = [
        .disconnect, .leConnectionUpdate, .readRSSI, .leReadRemoteFeatures, .readRemoteVersionInformation, .leSetDataLength,
        .leEnableEncryption, .leLongTermKeyRequestReply, .leLongTermKeyRequestNegativeReply, .leSetPHY, .leReadPHY,
    ]

    /// The opcode a Command Complete or Command Status names.
    static func answered(_ p: HCIPacket) -> HCIOpcode? {
        guard case let .event(code, b) = p else { return nil }
        switch code {
        case .commandComplete where b.count >= 3: return HCIOpcode(rawValue: UInt16(b[1]) | UInt16(b[2]) << 8)
        case .commandStatus where b.count >= 4: return HCIOpcode(rawValue: UInt16(b[2]) | UInt16(b[3]) << 8)
        default: return nil
        }
    }

    @Test(arguments: [false, true], SeededGenerator.seeds)
    func seededHostsCommandsAreEachAnsweredOnceInOrder(extended: Bool, seed: UInt64) async throws {
        let radio = VirtualRadio()
        let peer = await radio.makeController(address: BluetoothAddress("C0:FF:EE:00:00:01")!)
        let host = await radio.makeController(address: BluetoothAddress("C0:FF:EE:00:00:02")!, extendedAdvertising: extended)
        defer { Task { await peer.close(); await host.close() } }
        // The peer advertises, connectable, and the host connects to it first, so that
        // the commands on a link (and the ACL data) meet one.
        try await peer.send(LESetAdvertisingParameters(advertisingIntervalMin: 0x20, advertisingIntervalMax: 0x20).packet)
        try await peer.send(LESetAdvertisingEnable(advertisingEnable: true).packet)
        try await host.send(LECreateConnection(peerAddressType: .public, peerAddress: BluetoothAddress("C0:FF:EE:00:00:01")!).packet)
        // LE Connection Complete (subevent 0x01), status Success: the link's handle.
        let link = await firstElement(host.inbound.compactMap { p -> UInt16? in
            guard case let .event(.leMeta, b) = p, b.count >= 4, b[0] == 0x01, b[1] == 0x00 else { return nil }
            return UInt16(b[2]) | UInt16(b[3]) << 8
        }, within: .seconds(10))
        let live = try #require(link)

        var rng = SeededGenerator(seed)
        let implemented = host.implemented.sorted { $0.rawValue < $1.rawValue }
        var sent: [HCIOpcode] = []
        for _ in 0..<400 {
            let roll = Int.random(in: 0..<100, using: &rng)
            if roll < 8 {
                // ACL data: the live link (two times in three) or any handle, any flags, any length.
                let handle = [live, live, UInt16.random(in: 0...0x0FFF, using: &rng)].randomElement(using: &rng)!
                let boundary = ACLPacketBoundary(rawValue: UInt8.random(in: 0...3, using: &rng))
                try await host.send(.acl(ACLDataPacket(handle: handle, boundary: boundary, data: rng.bytes(Int.random(in: 0...40, using: &rng)))))
                continue
            }
            let op: HCIOpcode = roll < 16
                ? HCIOpcode(rawValue: [UInt16.random(in: 0xFC00...0xFFFF, using: &rng), UInt16.random(in: 0x2000...0x20FF, using: &rng),
                                       UInt16.random(in: 0...0x1FFF, using: &rng)].randomElement(using: &rng)!)
                : implemented.randomElement(using: &rng)!
            let n = Self.lengths[op].flatMap { _ in Bool.random(using: &rng) ? Self.lengths[op] : nil }
                ?? [0, 1, 2, 3, 6, 7, 8, 15, 16, 25, 32, Int.random(in: 0...255, using: &rng)].randomElement(using: &rng)!
            var parameters = rng.bytes(n)
            // Half the commands that name a link name the live one (their first two octets).
            if Self.onALink.contains(op), n >= 2, Bool.random(using: &rng) { parameters[0] = UInt8(live & 0xFF); parameters[1] = UInt8(live >> 8) }
            try await host.send(.command(opcode: op, parameters: parameters))
            sent.append(op)
        }
        // Then what a host does on a controller it finds in an unknown state.
        try await host.send(.command(opcode: .reset, parameters: []))
        try await host.send(.command(opcode: .readBDADDR, parameters: []))
        sent += [.reset, .readBDADDR]

        let got = await collect(host.inbound.compactMap { p -> (HCIOpcode, [UInt8])? in
            guard let op = Self.answered(p), case let .event(_, b) = p else { return nil }
            return (op, b)
        }, count: sent.count, within: .seconds(30))
        let answers = got.map(\.0), lastAnswer = got.last?.1 ?? []
        let firstDifference = zip(answers, sent).enumerated().first { $0.element.0 != $0.element.1 }?.offset ?? min(answers.count, sent.count)
        #expect(answers == sent, "seed \(seed): \(answers.count) answers to \(sent.count) commands, the first difference at \(firstDifference): \(sent.dropFirst(firstDifference).prefix(3)) sent, \(answers.dropFirst(firstDifference).prefix(3)) answered")
        // Read BD_ADDR after the Reset: success and this controller's address (§7.4.6).
        #expect(lastAnswer.count == 10 && lastAnswer[3] == 0x00 && Array(lastAnswer[4...]) == [0x02, 0x00, 0x00, 0xEE, 0xFF, 0xC0], "\(lastAnswer)")
    }
}
