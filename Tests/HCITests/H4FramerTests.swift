import Testing
@testable import HCI

@Suite(.timeLimit(.minutes(3)))
struct H4FramerTests {
    static let stream: [UInt8] = Reset().packet.h4Bytes
        + HCIEvent.commandComplete(CommandComplete(commandOpcode: .reset, returnParameters: [0])).packet.h4Bytes
        + HCIPacket.acl(ACLDataPacket(handle: 0x40, boundary: .firstFlushable, data: [3, 0, 4, 0, 0x0A, 1, 0])).h4Bytes
        + HCIPacket.sco([0x01, 0x00, 0x02, 0xAA, 0xBB]).h4Bytes
        + HCIPacket.iso([0x01, 0x00, 0x01, 0x00, 0xCC]).h4Bytes

    static func frame(_ chunks: [[UInt8]]) throws -> [HCIPacket] {
        var f = H4Framer()
        var out: [HCIPacket] = []
        for c in chunks {
            f.append(c)
            while let p = try f.nextPacket() { out.append(p) }
        }
        #expect(f.bufferedByteCount == 0)
        return out
    }

    @Test(arguments: [1, 2, 3, 7, 1000])
    func chunkSizeDoesNotMatter(size: Int) throws {
        let chunks = stride(from: 0, to: Self.stream.count, by: size).map { Array(Self.stream[$0..<min($0 + size, Self.stream.count)]) }
        let packets = try Self.frame(chunks)
        #expect(packets.count == 5)
        #expect(packets.flatMap(\.h4Bytes) == Self.stream)
    }

    @Test func incompletePacketWaits() throws {
        var f = H4Framer()
        f.append([0x04, 0x0E, 0x04, 0x01])
        #expect(try f.nextPacket() == nil)
        f.append([0x03, 0x0C, 0x00])
        #expect(try f.nextPacket() != nil)
    }

    @Test func unknownIndicatorFailsAndStaysFailed() throws {
        var f = H4Framer()
        f.append([0x09, 0x00])
        #expect(throws: DecodeError.invalidValue(what: "H4 packet indicator", value: 9)) { try f.nextPacket() }
        f.append(Reset().packet.h4Bytes)
        #expect(throws: DecodeError.self) { try f.nextPacket() }
    }

    @Test func packetLengthMismatchIsTyped() {
        #expect(throws: DecodeError.lengthMismatch(what: "HCI command Reset", declared: 1, actual: 0)) {
            try HCIPacket(h4: [0x01, 0x03, 0x0C, 0x01])
        }
        #expect(throws: DecodeError.self) { try HCIPacket(h4: []) }
        #expect(throws: DecodeError.self) { try HCIPacket(h4: [0x02, 0x40]) }
    }
}
