import Testing
@testable import HCI

/// Vectors are either written out from the Core Specification's parameter tables
/// or taken from Fixtures/rootcanal-init.btsnoop (recorded from Rootcanal 1.10.0).
@Suite(.timeLimit(.minutes(3)))
struct CodecTests {
    /// Opcodes as a command line names them: hex, or the specification's name with
    /// case, spaces and hyphens aside; anything else is nil.
    @Test func opcodesParseFromNamesAndHex() {
        #expect(HCIOpcode(parsing: "0x2018") == .leRand)
        #expect(HCIOpcode(parsing: "LE Rand") == .leRand)
        #expect(HCIOpcode(parsing: "le-rand") == .leRand)
        #expect(HCIOpcode(parsing: " reset") == .reset && HCIOpcode(parsing: "0x2018 ") == .leRand)
        #expect(HCIOpcode(parsing: "Read Local Version Information") == .readLocalVersionInformation)
        #expect(HCIOpcode(parsing: "0xFC01")?.rawValue == 0xFC01, "an opcode this stack does not name")
        #expect(HCIOpcode(parsing: "HCI_LE_Rand") == .leRand)
        #expect(HCIOpcode(parsing: "0x08:0x0018") == .leRand && HCIOpcode(parsing: "8:18") == .leRand)
        #expect(HCIOpcode(parsing: "0x3f:0x001")?.rawValue == 0xFC01)
        for bad in ["", "0x", "0xZZ", "0x12345", "LE Frobnicate", "---", "0x40:0x0001", "0x08:0x0400", "0x08:", ":0x01", "1:2:3", "hci_"] {
            #expect(HCIOpcode(parsing: bad) == nil, "\(bad)")
        }
    }

    @Test func byteReaderReadsLittleEndianAndReportsTruncation() throws {
        var r = ByteReader([0x34, 0x12, 0x78, 0x56, 0x34, 0x12, 0xAA], context: "t")
        #expect(try r.readUInt16() == 0x1234)
        #expect(try r.readUInt32() == 0x1234_5678)
        #expect(throws: DecodeError.truncated(what: "t: UInt16", offset: 6, needed: 2, available: 1)) { try r.readUInt16() }
        #expect(try r.readUInt8() == 0xAA)
        #expect(r.isAtEnd)
    }

    @Test func byteReaderOverASliceReadsOnlyTheSlice() throws {
        let bytes: [UInt8] = [0xFF, 0xFF, 0x34, 0x12, 0xAA, 0xFF]
        var r = ByteReader(bytes[2..<5], context: "t")
        #expect(r.offset == 2 && r.remaining == 3)
        #expect(try r.readUInt16() == 0x1234)
        // The byte after the slice is not there to read; offsets are the array's.
        #expect(throws: DecodeError.truncated(what: "t: UInt16", offset: 4, needed: 2, available: 1)) { try r.readUInt16() }
        var sub = try r.readReader(1, "rest")
        #expect(try sub.readUInt8() == 0xAA && sub.isAtEnd && r.isAtEnd)
        var s = ByteReader(bytes[2..<5], context: "t")
        #expect(s.readRemaining() == [0x34, 0x12, 0xAA])
    }

    /// Hex from people and files: separators between whole bytes only, so `1:2` is
    /// refused rather than read as 0x12 (it was, until manufacturer data 1:2:3:4:5
    /// advertised 23 45); numbers in messages print at full width, as btmon prints them.
    @Test func hexReadsWholeBytesAndPrintsFullWidth() {
        #expect([UInt8](hex: "01:02") == [1, 2] && [UInt8](hex: "01 02\n0a-FF") == [1, 2, 0x0A, 0xFF] && [UInt8](hex: "") == [])
        for bad in ["1:2", "0 1", "1:2:3:4:5", "012", "0x01", "０１", "zz"] { #expect([UInt8](hex: bad) == nil, "\(bad)") }
        #expect(hex4(0x3) == "0003" && hex4(0xEFE) == "0efe" && hex4(0xFFFF) == "ffff" && hex2(0x9) == "09")
    }

    @Test func addressPrintsMostSignificantFirst() throws {
        let a = try BluetoothAddress(wireBytes: [0x00, 0x17, 0xDE, 0x10, 0x4C, 0xDA])
        #expect(a.description == "DA:4C:10:DE:17:00")
        #expect(BluetoothAddress("DA:4C:10:DE:17:00") == a)
        #expect(BluetoothAddress("DA:4C:10:DE:17") == nil)
        #expect(BluetoothAddress("zz:4C:10:DE:17:00") == nil)
        // A sign is not a hex digit, though UInt8(_:radix:) takes one ("+1" is 1).
        for bad in ["DA:4C:10:DE:17:+1", "DA:4C:10:DE:17:-0", "DA:4C:10:DE:17:０1"] { #expect(BluetoothAddress(bad) == nil, "\(bad)") }
    }

    /// UUIDs as the specification writes them, and nothing looser: hyphens only where
    /// the 36-character form has them (they were dropped wherever they stood, so
    /// "1-8-0-F" was 180F), no signs, no separators.
    @Test func uuidsParseFromTheirWrittenFormsOnly() {
        let battery = BluetoothUUID(0x180F)
        for good in ["180F", "180f", "0000180F", "0000180f-0000-1000-8000-00805f9b34fb", "0000180F00001000800000805F9B34FB"] {
            #expect(BluetoothUUID(good) == battery, "\(good)")
        }
        for bad in ["1-8-0-F", "180F-", "-180F", "+80F", "18 0F", "18:0F", "0000180f0000-1000-8000-00805f9b34fb-", "0000180-f0000-1000-8000-00805f9b34fb",
                    "０１８０", "", "180", "0x180F"] {
            #expect(BluetoothUUID(bad) == nil, "\(bad)")
        }
        #expect(UInt16(hexDigits: "0efe") == 0x0EFE && UInt16(hexDigits: "+ef") == nil && UInt16(hexDigits: "") == nil && UInt8(hexDigits: "100") == nil)
        #expect(HCIOpcode(parsing: "0x+2018") == nil && HCIOpcode(parsing: "0x2018 x") == nil && HCIOpcode(parsing: "0x08:+0x18") == nil)
    }

    @Test func resetCommandEncodesExactly() {
        #expect(Reset().packet.h4Bytes == [0x01, 0x03, 0x0C, 0x00])
        #expect(HCIOpcode.reset.ogf == 0x03)
        #expect(HCIOpcode.reset.ocf == 0x0003)
    }

    @Test func leSetAdvertisingParametersMatchesSpecLayout() throws {
        // Vol 4, Part E, §7.8.5: 15 octets.
        let c = LESetAdvertisingParameters(advertisingIntervalMin: 0x00A0, advertisingIntervalMax: 0x00B0, advertisingType: 0,
                                           ownAddressType: .random, advertisingChannelMap: 0x07)
        #expect(c.packet.h4Bytes == [0x01, 0x06, 0x20, 0x0F, 0xA0, 0x00, 0xB0, 0x00, 0x00, 0x01, 0x00,
                                     0, 0, 0, 0, 0, 0, 0x07, 0x00])
        #expect(try LESetAdvertisingParameters.decode(c.parameters) == c)
    }

    @Test func leSetAdvertisingDataPadsTo31() throws {
        let data: [UInt8] = [0x02, 0x01, 0x06, 0x05, 0x09, 0x74, 0x65, 0x73, 0x74]
        let c = LESetAdvertisingData(data: data)
        #expect(c.parameters.count == 32)
        #expect(c.parameters[0] == 9)
        #expect(try LESetAdvertisingData.decode(c.parameters).data == data)
        #expect(throws: DecodeError.self) { try LESetAdvertisingData.decode([32] + [UInt8](repeating: 0, count: 31)) }
    }

    @Test func everyRegisteredCommandNamesItsOpcodeAndIsInTheSupportedCommandsTable() {
        for t in HCICommandRegistry.all {
            #expect(t.opcode.name != nil, "\(t.opcode)")
            // §6.27 gives every command a bit except Read Local Supported Commands itself.
            if t.opcode != .readLocalSupportedCommands { #expect(SupportedCommands.bits[t.opcode] != nil, "\(t.opcode)") }
        }
    }

    @Test func extendedScanParametersDecodeOneBlockPerPHY() throws {
        let c = LESetExtendedScanParameters(scanningPHYs: 0x05, phys: [.init(scanType: 1), .init(scanType: 0, scanInterval: 0x20, scanWindow: 0x10)])
        let d = try LESetExtendedScanParameters.decode(c.parameters)
        #expect(d == c)
        #expect(c.parameters.count == 3 + 2 * 5)
        // One PHY bit but two blocks' worth of bytes: trailing bytes are an error.
        var p = c.parameters
        p[2] = 0x01
        #expect(throws: DecodeError.self) { try LESetExtendedScanParameters.decode(p) }
    }

    @Test func extendedCreateConnectionRoundTrips() throws {
        let c = LEExtendedCreateConnection(peerAddressType: .random, peerAddress: BluetoothAddress("C0:11:22:33:44:55")!,
                                           initiatingPHYs: 0x03, phys: [.init(), .init(scanInterval: 0x30)])
        #expect(try LEExtendedCreateConnection.decode(c.parameters) == c)
        #expect(c.parameters.count == 10 + 2 * 16)
    }

    @Test func periodicAdvertisingCommandsMatchTheSpecLayout() throws {
        // §7.8.61: handle, interval min and max (1.25 ms), properties; 7 octets.
        let p = LESetPeriodicAdvertisingParameters(advertisingHandle: 1, periodicAdvertisingIntervalMin: 0x0050, periodicAdvertisingIntervalMax: 0x0060)
        #expect(p.packet.h4Bytes == [0x01, 0x3E, 0x20, 0x07, 0x01, 0x50, 0x00, 0x60, 0x00, 0x00, 0x00])
        #expect(try LESetPeriodicAdvertisingParameters.decode(p.parameters) == p)
        // §7.8.62: handle, operation, length, data.
        let d = LESetPeriodicAdvertisingData(advertisingHandle: 1, data: [0x02, 0x01, 0x06])
        #expect(d.packet.h4Bytes == [0x01, 0x3F, 0x20, 0x06, 0x01, 0x03, 0x03, 0x02, 0x01, 0x06])
        // §7.8.63: Enable, then the handle.
        #expect(LESetPeriodicAdvertisingEnable(enable: true, advertisingHandle: 2).packet.h4Bytes == [0x01, 0x40, 0x20, 0x02, 0x01, 0x02])
        // §7.8.67: options, SID, address type and address, skip, Sync_Timeout, Sync_CTE_Type; 14 octets.
        let c = LEPeriodicAdvertisingCreateSync(advertisingSID: 5, advertiserAddressType: .random,
                                                advertiserAddress: BluetoothAddress("C0:11:22:33:44:55")!, skip: 1, syncTimeout: 0x00C8)
        #expect(c.packet.h4Bytes == [0x01, 0x44, 0x20, 0x0E, 0x00, 0x05, 0x01, 0x55, 0x44, 0x33, 0x22, 0x11, 0xC0,
                                     0x01, 0x00, 0xC8, 0x00, 0x00])
        #expect(try LEPeriodicAdvertisingCreateSync.decode(c.parameters) == c)
        #expect(LEPeriodicAdvertisingCreateSync.completesWithStatus)
        #expect(LEPeriodicAdvertisingCreateSyncCancel().packet.h4Bytes == [0x01, 0x45, 0x20, 0x00])
        #expect(LEPeriodicAdvertisingTerminateSync(syncHandle: 0x0102).packet.h4Bytes == [0x01, 0x46, 0x20, 0x02, 0x02, 0x01])
        // Longer data goes in 252-octet pieces: first, intermediate, last.
        let pieces = LESetPeriodicAdvertisingData.fragments([UInt8](repeating: 7, count: 600), handle: 3)
        #expect(pieces.map(\.operation) == [1, 0, 2])
        #expect(pieces.map(\.data.count) == [252, 252, 96])
        #expect(LESetPeriodicAdvertisingData.fragments([], handle: 3).map(\.operation) == [3])
    }

    @Test func phyCommandsMatchTheSpecLayout() throws {
        // §7.8.47: Connection_Handle; returns the handle, TX_PHY and RX_PHY.
        #expect(LEReadPHY(connectionHandle: 0x0040).packet.h4Bytes == [0x01, 0x30, 0x20, 0x02, 0x40, 0x00])
        let complete: [UInt8] = [0x04, 0x0E, 0x08, 0x01, 0x30, 0x20, 0x00, 0x40, 0x00, 0x02, 0x01]
        guard case let .commandComplete(cc) = try HCIEvent(HCIPacket(h4: complete)) else { Issue.record("not a Command Complete"); return }
        let r = try #require(try HCICommandRegistry.decodeReturn(opcode: cc.commandOpcode, returnParameters: Array(cc.returnParameters.dropFirst()))
                             as? LEReadPHY.ReturnParameters)
        #expect(r.connectionHandle == 0x0040 && r.txPHY == 2 && r.rxPHY == 1)
        for n in 0..<4 {
            #expect(throws: (any Error).self) { try HCICommandRegistry.decodeReturn(opcode: .leReadPHY, returnParameters: Array([0x40, 0x00, 0x02, 0x01].prefix(n))) }
        }
        // §7.8.49: Connection_Handle, All_PHYs, TX_PHYs, RX_PHYs, PHY_Options; Command Status.
        let set = LESetPHY(connectionHandle: 0x0040, txPHYs: 0x02, rxPHYs: 0x03)
        #expect(set.packet.h4Bytes == [0x01, 0x32, 0x20, 0x07, 0x40, 0x00, 0x00, 0x02, 0x03, 0x00, 0x00])
        #expect(LESetPHY.completesWithStatus)
        // §7.7.65.12: status, Connection_Handle, TX_PHY, RX_PHY.
        let update: [UInt8] = [0x04, 0x3E, 0x06, 0x0C, 0x00, 0x40, 0x00, 0x02, 0x02]
        #expect(try HCIEvent(HCIPacket(h4: update)) == .le(.phyUpdateComplete(LEPHYUpdateComplete(connectionHandle: 0x40, txPHY: 2, rxPHY: 2))))
    }

    @Test func dataLengthCommandsMatchTheSpecLayout() throws {
        // §7.8.35: Suggested_Max_TX_Octets, Suggested_Max_TX_Time (opcode 0x2024).
        let write = LEWriteSuggestedDefaultDataLength(suggestedMaxTxOctets: 251, suggestedMaxTxTime: 2120)
        #expect(write.packet.h4Bytes == [0x01, 0x24, 0x20, 0x04, 0xFB, 0x00, 0x48, 0x08])
        #expect(try LEWriteSuggestedDefaultDataLength.decode(write.parameters) == write)
        // §7.8.34: no parameters (opcode 0x2023); returns the two values.
        #expect(LEReadSuggestedDefaultDataLength().packet.h4Bytes == [0x01, 0x23, 0x20, 0x00])
        let complete: [UInt8] = [0x04, 0x0E, 0x08, 0x01, 0x23, 0x20, 0x00, 0x1B, 0x00, 0x48, 0x01]
        guard case let .commandComplete(cc) = try HCIEvent(HCIPacket(h4: complete)) else { Issue.record("not a Command Complete"); return }
        let r = try #require(try HCICommandRegistry.decodeReturn(opcode: cc.commandOpcode, returnParameters: Array(cc.returnParameters.dropFirst()))
                             as? LEReadSuggestedDefaultDataLength.ReturnParameters)
        #expect(r.suggestedMaxTxOctets == 27 && r.suggestedMaxTxTime == 328)
        for n in 0..<4 {
            #expect(throws: (any Error).self) {
                try HCICommandRegistry.decodeReturn(opcode: .leReadSuggestedDefaultDataLength, returnParameters: Array([0x1B, 0x00, 0x48, 0x01].prefix(n)))
            }
        }
        // §7.8.33: Connection_Handle, TX_Octets, TX_Time (opcode 0x2022).
        #expect(LESetDataLength(connectionHandle: 0x0040, txOctets: 251, txTime: 2120).packet.h4Bytes
                == [0x01, 0x22, 0x20, 0x06, 0x40, 0x00, 0xFB, 0x00, 0x48, 0x08])
        #expect(LEDataLengthRange.octets == 27...251 && LEDataLengthRange.time == 328...17040)
    }

    @Test func periodicAdvertiserListCommandsMatchTheSpecLayout() throws {
        // §7.8.70, §7.8.71: Advertiser_Address_Type, Advertiser_Address, Advertising_SID; 8 octets.
        let a = BluetoothAddress("C0:11:22:33:44:55")!
        let add = LEAddDeviceToPeriodicAdvertiserList(advertiserAddressType: .random, advertiserAddress: a, advertisingSID: 0x0F)
        #expect(add.packet.h4Bytes == [0x01, 0x47, 0x20, 0x08, 0x01, 0x55, 0x44, 0x33, 0x22, 0x11, 0xC0, 0x0F])
        #expect(try LEAddDeviceToPeriodicAdvertiserList.decode(add.parameters) == add)
        let remove = LERemoveDeviceFromPeriodicAdvertiserList(advertiserAddressType: .public, advertiserAddress: a, advertisingSID: 2)
        #expect(remove.packet.h4Bytes == [0x01, 0x48, 0x20, 0x08, 0x00, 0x55, 0x44, 0x33, 0x22, 0x11, 0xC0, 0x02])
        #expect(try LERemoveDeviceFromPeriodicAdvertiserList.decode(remove.parameters) == remove)
        for n in 0..<8 {
            #expect(throws: (any Error).self) { try LEAddDeviceToPeriodicAdvertiserList.decode(Array(add.parameters.prefix(n))) }
        }
        // §7.8.72, §7.8.73: no parameters; the size comes back as one octet.
        #expect(LEClearPeriodicAdvertiserList().packet.h4Bytes == [0x01, 0x49, 0x20, 0x00])
        #expect(LEReadPeriodicAdvertiserListSize().packet.h4Bytes == [0x01, 0x4A, 0x20, 0x00])
        let complete: [UInt8] = [0x04, 0x0E, 0x05, 0x01, 0x4A, 0x20, 0x00, 0x08]
        guard case let .commandComplete(cc) = try HCIEvent(HCIPacket(h4: complete)) else { Issue.record("not a Command Complete"); return }
        #expect(cc.commandOpcode == .leReadPeriodicAdvertiserListSize)
        #expect(try HCICommandRegistry.decodeReturn(opcode: cc.commandOpcode, returnParameters: Array(cc.returnParameters.dropFirst())) as? HCIOctetReturn
                == HCIOctetReturn(value: 8))
        #expect(HCIOpcode.leClearPeriodicAdvertiserList.description.contains("LE Clear Periodic Advertiser List"))
        #expect(SupportedCommands.bits[.leReadPeriodicAdvertiserListSize]! == (38, 6))
    }

    @Test func periodicAdvertisingEventsMatchTheSpecLayout() throws {
        // §7.7.65.14: status, Sync_Handle, SID, address type, address, PHY, interval, clock accuracy.
        let established: [UInt8] = [0x04, 0x3E, 0x10, 0x0E, 0x00, 0x01, 0x00, 0x05, 0x01, 0x55, 0x44, 0x33, 0x22, 0x11, 0xC0,
                                    0x01, 0x50, 0x00, 0x05]
        let e = try HCIEvent(HCIPacket(h4: established))
        #expect(e == .le(.periodicAdvertisingSyncEstablished(LEPeriodicAdvertisingSyncEstablished(
            syncHandle: 1, advertisingSID: 5, advertiserAddressType: .random, advertiserAddress: BluetoothAddress("C0:11:22:33:44:55")!,
            periodicAdvertisingInterval: 0x50, advertiserClockAccuracy: 5))))
        // §7.7.65.15: Sync_Handle, TX_Power, RSSI, CTE_Type, Data_Status, Data_Length, Data.
        let report: [UInt8] = [0x04, 0x3E, 0x0B, 0x0F, 0x01, 0x00, 0x7F, 0xC4, 0xFF, 0x00, 0x03, 0x02, 0x01, 0x06]
        #expect(try HCIEvent(HCIPacket(h4: report)) == .le(.periodicAdvertisingReport(LEPeriodicAdvertisingReport(
            syncHandle: 1, rssi: -60, data: [2, 1, 6]))))
        // A Data_Length past the event's end is a typed error.
        var long = report
        long[10] = 4
        #expect(throws: DecodeError.self) { try HCIEvent(HCIPacket(h4: long)) }
        #expect(try HCIEvent(HCIPacket(h4: [0x04, 0x3E, 0x03, 0x10, 0x02, 0x00])) == .le(.periodicAdvertisingSyncLost(LEPeriodicAdvertisingSyncLost(syncHandle: 2))))
    }

    @Test func encryptionChangeV2Decodes() throws {
        // Event 0x59: status, handle 0x0040, enabled, key size 7 (§7.7.8).
        let p = try HCIPacket(h4: [0x04, 0x59, 0x05, 0x00, 0x40, 0x00, 0x01, 0x07])
        guard case let .encryptionChangeV2(e) = try HCIEvent(p) else { Issue.record("not Encryption Change v2"); return }
        #expect(e == EncryptionChangeV2(status: .success, connectionHandle: 0x40, encryptionEnabled: 1, encryptionKeySize: 7))
        #expect(HCIEvent.encryptionChangeV2(e).packet == p)
        #expect(throws: (any Error).self) { try HCIEvent(HCIPacket(h4: [0x04, 0x59, 0x04, 0x00, 0x40, 0x00, 0x01])) }
        #expect(SetEventMaskPage2().parameters == [0, 0, 0, 0x02, 0, 0, 0, 0])
    }

    @Test func commandCompleteFromRootcanalDecodes() throws {
        // Read BD_ADDR's Command Complete as Rootcanal 1.10.0 answers the first controller that connects.
        let p = try HCIPacket(h4: [0x04, 0x0E, 0x0A, 0x01, 0x09, 0x10, 0x00, 0x00, 0x17, 0xDE, 0x10, 0x4C, 0xDA])
        guard case let .commandComplete(cc) = try HCIEvent(p) else { Issue.record("not CC"); return }
        #expect(cc.commandOpcode == .readBDADDR)
        #expect(cc.status == .success)
        var r = ByteReader(Array(cc.returnParameters.dropFirst()))
        #expect(try ReadBDADDR.ReturnParameters(returnParameters: &r).address.description == "DA:4C:10:DE:17:00")
    }

    @Test func advertisingReportWithTwoReports() throws {
        let r1 = LEAdvertisingReport.Report(eventType: 0, addressType: .public, address: BluetoothAddress("11:22:33:44:55:66")!,
                                            data: [0x02, 0x01, 0x06], rssi: -60)
        let r2 = LEAdvertisingReport.Report(eventType: 4, addressType: .random, address: BluetoothAddress("C1:22:33:44:55:66")!,
                                            data: [], rssi: -80)
        let e = HCIEvent.le(.advertisingReport(LEAdvertisingReport(reports: [r1, r2])))
        let bytes = e.packet.h4Bytes
        #expect(bytes.prefix(5) == [0x04, 0x3E, 0x19, 0x02, 0x02])
        #expect(try HCIEvent(HCIPacket(h4: bytes)) == e)
        // Cut inside the second report: a specific truncation error.
        var cut = Array(bytes.prefix(bytes.count - 3))
        cut[2] = UInt8(cut.count - 3)
        #expect(throws: DecodeError.self) { try HCIEvent(HCIPacket(h4: cut)) }
    }

    @Test func advertisingReportRejectsOversizeData() {
        // Data_Length 32 is larger than the 31 octets legacy advertising allows.
        let params: [UInt8] = [0x02, 0x01, 0x00, 0x00, 1, 2, 3, 4, 5, 6, 32] + [UInt8](repeating: 0, count: 33)
        #expect(throws: DecodeError.invalidValue(what: "LE Advertising Report Data_Length[0]", value: 32)) {
            try HCIEvent(code: .leMeta, parameters: params)
        }
    }

    @Test func unknownEventAndSubeventRoundTripByteForByte() throws {
        let unknown = HCIPacket.event(code: HCIEventCode(rawValue: 0x57), parameters: [1, 2, 3])
        let e = try HCIEvent(unknown)
        #expect(e == .unknown(code: HCIEventCode(rawValue: 0x57), parameters: [1, 2, 3]))
        #expect(e.packet == unknown)
        let sub = HCIPacket.event(code: .leMeta, parameters: [0x22, 9, 8, 7])
        let s = try HCIEvent(sub)
        #expect(s.packet == sub)
        #expect(HCIEventCode(rawValue: 0x37).description == "unknown 0x37")
        #expect(HCIOpcode(rawValue: 0xFC01).description == "unknown 0xfc01")
    }

    @Test func everyEventRoundTrips() throws {
        let a = BluetoothAddress("11:22:33:44:55:66")!
        let events: [HCIEvent] = [
            .commandStatus(CommandStatus(status: .success, commandOpcode: .leCreateConnection)),
            .disconnectionComplete(DisconnectionComplete(connectionHandle: 0x40, reason: .remoteUserTerminatedConnection)),
            .numberOfCompletedPackets(NumberOfCompletedPackets(entries: [.init(connectionHandle: 1, numCompletedPackets: 2), .init(connectionHandle: 3, numCompletedPackets: 4)])),
            .encryptionChange(EncryptionChange(connectionHandle: 1, encryptionEnabled: 1)),
            .encryptionKeyRefreshComplete(EncryptionKeyRefreshComplete(connectionHandle: 1)),
            .readRemoteVersionInformationComplete(ReadRemoteVersionInformationComplete(connectionHandle: 1, version: 12, companyIdentifier: 224, subversion: 7)),
            .hardwareError(HardwareError(hardwareCode: 3)),
            .dataBufferOverflow(DataBufferOverflow(linkType: 1)),
            .le(.connectionComplete(LEConnectionComplete(connectionHandle: 1, role: .central, peerAddressType: .public, peerAddress: a))),
            .le(.enhancedConnectionComplete(LEEnhancedConnectionComplete(connectionHandle: 1, role: .peripheral, peerAddressType: .random, peerAddress: a))),
            .le(.enhancedConnectionComplete(LEEnhancedConnectionComplete(connectionHandle: 1, role: .peripheral, peerAddressType: .random, peerAddress: a, v2Fields: .init(advertisingHandle: 0, syncHandle: 0xFFFF)))),
            .le(.extendedAdvertisingReport(LEExtendedAdvertisingReport(reports: [.init(eventType: 0x13, addressType: .public, address: a, rssi: -50, data: [2, 1, 6])]))),
            .le(.directedAdvertisingReport(LEDirectedAdvertisingReport(reports: [.init(addressType: .public, address: a, directAddressType: .random, directAddress: a, rssi: -40)]))),
            .le(.connectionUpdateComplete(LEConnectionUpdateComplete(connectionHandle: 1, connectionInterval: 6, peripheralLatency: 0, supervisionTimeout: 100))),
            .le(.readRemoteFeaturesComplete(LEReadRemoteFeaturesComplete(connectionHandle: 1, leFeatures: 0x1F))),
            .le(.longTermKeyRequest(LELongTermKeyRequest(connectionHandle: 1, randomNumber: 0x0102030405060708, encryptedDiversifier: 0x1234))),
            .le(.dataLengthChange(LEDataLengthChange(connectionHandle: 1, maxTxOctets: 251, maxTxTime: 2120, maxRxOctets: 251, maxRxTime: 2120))),
            .le(.phyUpdateComplete(LEPHYUpdateComplete(connectionHandle: 1, txPHY: 2, rxPHY: 2))),
            .le(.channelSelectionAlgorithm(LEChannelSelectionAlgorithm(connectionHandle: 1, channelSelectionAlgorithm: 1))),
            .le(.advertisingSetTerminated(LEAdvertisingSetTerminated(advertisingHandle: 0, connectionHandle: 1))),
            .le(.scanTimeout),
            .le(.periodicAdvertisingSyncEstablished(LEPeriodicAdvertisingSyncEstablished(syncHandle: 1, advertisingSID: 3, advertiserAddressType: .random,
                                                                                        advertiserAddress: a, periodicAdvertisingInterval: 0x50))),
            .le(.periodicAdvertisingReport(LEPeriodicAdvertisingReport(syncHandle: 1, txPower: -4, rssi: -60, dataStatus: 1, data: [2, 1, 6]))),
            .le(.periodicAdvertisingSyncLost(LEPeriodicAdvertisingSyncLost(syncHandle: 1))),
        ]
        for e in events {
            let decoded = try HCIEvent(HCIPacket(h4: e.packet.h4Bytes))
            #expect(decoded == e, "\(e.code)")
            // Every proper prefix of the parameters is a typed truncation error, never a crash.
            let params = e.parameters
            for n in 0..<params.count where !(e == .le(.scanTimeout)) {
                #expect(throws: DecodeError.self) { try HCIEvent(code: e.code, parameters: Array(params.prefix(n))) }
            }
        }
    }

    @Test func everyStatusCodeHasItsSpecName() {
        for code in 0...0x48 where ![0x2B, 0x31, 0x33].contains(code) {
            #expect(HCIStatus(rawValue: UInt8(code)).name != nil, "0x\(String(code, radix: 16))")
        }
        #expect(HCIStatus(rawValue: 0x3E).name == "Connection Failed to be Established / Synchronization Timeout")
        #expect(HCIStatus(rawValue: 0x99).description == "unknown (0x99)")
    }

    @Test func adStructuresReportOverrun() {
        let (s, damage) = ADStructure.parse([0x02, 0x01, 0x06, 0x05, 0x09, 0x41])
        #expect(s == [ADStructure(type: 1, data: [6])])
        #expect(damage == .truncated(what: "AD structure at offset 3", offset: 3, needed: 5, available: 2))
        #expect(ADStructure.parse([0x02, 0x01, 0x06, 0x00, 0x00]).structures.count == 1)
    }

    @Test func supportedCommandsBitLookup() {
        var bytes = [UInt8](repeating: 0, count: 64)
        bytes[5] = 0x80   // Reset
        bytes[41] = 0x20  // LE Read Buffer Size [v2]
        let s = SupportedCommands(bytes: bytes)
        #expect(s.supports(.reset) == true)
        #expect(s.supports(.leReadBufferSizeV2) == true)
        #expect(s.supports(.leSetDataLength) == false)
        #expect(s.supports(HCIOpcode(rawValue: 0xFC00)) == nil)
    }
}
