// The security toolbox against the Core Specification's sample data (v5.4, Vol 3,
// Part H, Appendix D and §2.2's examples), values most significant octet first as
// the specification prints them.

import BLECrypto
import Testing

func hex(_ s: String) -> [UInt8] {
    let digits = s.filter { !$0.isWhitespace }
    var out: [UInt8] = []
    var i = digits.startIndex
    while i < digits.endIndex {
        let j = digits.index(i, offsetBy: 2)
        out.append(UInt8(digits[i..<j], radix: 16)!)
        i = j
    }
    return out
}

@Suite(.timeLimit(.minutes(3))) struct ToolboxTests {
    // D.1 P-256 data set.
    let privateA = hex("3f49f6d4 a3c55f38 74c9b3e3 d2103f50 4aff607b eb40b799 5899b8a6 cd3c1abd")
    let privateB = hex("55188b3d 32f6bb9a 900afcfb eed4e72a 59cb9ac2 f19d7cfb 6b4fdd49 f47fc5fd")
    let publicAX = hex("20b003d2 f297be2c 5e2c83a7 e9f9a5b9 eff49111 acf4fddb cc030148 0e359de6")
    let publicAY = hex("dc809c49 652aeb6d 63329abf 5a52155c 766345c2 8fed3024 741c8ed0 1589d28b")
    let publicBX = hex("1ea1f0f0 1faf1d96 09592284 f19e4c00 47b58afd 8615a69f 559077b2 2faaa190")
    let publicBY = hex("4c55f33e 429dad37 7356703a 9ab85160 472d1130 e28e3676 5f89aff9 15b1214a")
    let dhKey = hex("ec0234a3 57c8ad05 341010a6 0a397d9b 99796b13 b4f866f1 868d34f3 73bfa698")

    @Test func p256DiffieHellmanMatchesTheSpecificationsDataSet() throws {
        let a = try P256KeyPair(privateKey: privateA)
        let b = try P256KeyPair(privateKey: privateB)
        #expect(a.publicKey.x == publicAX)
        #expect(a.publicKey.y == publicAY)
        #expect(b.publicKey.x == publicBX)
        #expect(try a.dhKey(peerX: publicBX, peerY: publicBY) == dhKey)
        #expect(try b.dhKey(peerX: publicAX, peerY: publicAY) == dhKey)
    }

    @Test func aPublicKeyOffTheCurveIsRefused() throws {
        let a = try P256KeyPair(privateKey: privateA)
        var y = publicBY
        y[31] ^= 1
        #expect(throws: P256Error.invalidPublicKey) { try a.dhKey(peerX: publicBX, peerY: y) }
        // The point at infinity / all zeros, and short keys.
        #expect(throws: P256Error.invalidPublicKey) { try a.dhKey(peerX: [UInt8](repeating: 0, count: 32), peerY: [UInt8](repeating: 0, count: 32)) }
        #expect(throws: P256Error.invalidPublicKey) { try a.dhKey(peerX: Array(publicBX.prefix(31)), peerY: publicBY) }
    }

    @Test func c1() throws {
        let v = try SecurityToolbox.c1(
            k: [UInt8](repeating: 0, count: 16), r: hex("5783D52156AD6F0E6388274EC6702EE0"),
            preq: hex("07071000000101"), pres: hex("05000800000302"), iat: 1, rat: 0,
            ia: hex("A1A2A3A4A5A6"), ra: hex("B1B2B3B4B5B6"))
        #expect(v == hex("1e1e3fef878988ead2a74dc5bef13b86"))
    }

    @Test func s1() throws {
        let v = try SecurityToolbox.s1(k: [UInt8](repeating: 0, count: 16), r1: hex("000F0E0D0C0B0A091122334455667788"),
                                       r2: hex("010203040506070899AABBCCDDEEFF00"))
        #expect(v == hex("9a1fe1f0e8b0f49b5b4216ae796da062"))
    }

    @Test func f4() throws {
        let v = try SecurityToolbox.f4(u: publicAX, v: privateB, x: hex("d5cb8454 d177733e ffffb2ec 712baeab"), z: 0)
        #expect(v == hex("f2c916f1 07a9bd1c f1eda1be a974872d"))
    }

    @Test func f5() throws {
        let (mac, ltk) = try SecurityToolbox.f5(
            w: dhKey, n1: hex("d5cb8454 d177733e ffffb2ec 712baeab"), n2: hex("a6e8e7cc 25a75f6e 216583f7 ff3dc4cf"),
            a1: hex("00561237 37bfce"), a2: hex("00a71370 2dcfc1"))
        #expect(mac == hex("2965f176 a1084a02 fd3f6a20 ce636e20"))
        #expect(ltk == hex("69867911 69d7cd23 980522b5 94750a38"))
    }

    @Test func f6() throws {
        let v = try SecurityToolbox.f6(
            w: hex("2965f176 a1084a02 fd3f6a20 ce636e20"), n1: hex("d5cb8454 d177733e ffffb2ec 712baeab"),
            n2: hex("a6e8e7cc 25a75f6e 216583f7 ff3dc4cf"), r: hex("12a3343b b453bb54 08da42d2 0c2d0fc8"),
            ioCap: hex("010102"), a1: hex("00561237 37bfce"), a2: hex("00a71370 2dcfc1"))
        #expect(v == hex("e3c47398 9cd0e8c5 d26c0b09 da958f61"))
    }

    @Test func g2() throws {
        let v = try SecurityToolbox.g2(u: publicAX, v: privateB, x: hex("d5cb8454 d177733e ffffb2ec 712baeab"),
                                       y: hex("a6e8e7cc 25a75f6e 216583f7 ff3dc4cf"))
        #expect(v == 0x2F9E_D5BA)
        #expect(v % 1_000_000 == 0x2F9E_D5BA % 1_000_000)
    }

    @Test func h6AndH7() throws {
        let w = hex("ec0234a3 57c8ad05 341010a6 0a397d9b")
        #expect(try SecurityToolbox.h6(w: w, keyID: hex("6c656272")) == hex("2d9ae102 e76dc91c e8d3a9e2 80b16399"))
        #expect(try SecurityToolbox.h7(salt: hex("00000000 00000000 00000000 746D7031"), w: w) == hex("fb173597 c6a3c0ec d2998c2a 75a57011"))
    }

    @Test func ah() throws {
        #expect(try SecurityToolbox.ah(irk: hex("ec0234a3 57c8ad05 341010a6 0a397d9b"), prand: hex("708194")) == hex("0dfbaa"))
    }
    // Data signing (§2.4.5) has no sample data in the specification; these vectors are
    // BlueZ's (unit/test-crypto.c, produced by the kernel's cmac(aes)), in PDU order. The
    // last is a whole Signed Write Command: handle 0x0012, value 13 37, SignCounter 1.
    @Test func signatureMatchesBlueZ() throws {
        let rfcKey = hex("3c4fcf09 8815f7ab a6d2ae28 16157e2b")
        #expect(try SecurityToolbox.signature(csrk: rfcKey, message: [], counter: 0) == hex("00000000 b3a85941 27ebc2c0"))
        #expect(try SecurityToolbox.signature(csrk: rfcKey, message: hex("6bc1bee2 2e409f96 e93d7e11 7393172a"), counter: 0)
                    == hex("00000000 273974f4 392a232a"))
        let csrk = hex("505E42DF 9691EC72 D31FCDFB EB641B61")
        #expect(try SecurityToolbox.signature(csrk: csrk, message: hex("d2120013 37"), counter: 1) == hex("01000000 F1871E93 3C900FF2"))
    }

    @Test func aSignedWriteVerifiesOnlyUnchanged() {
        let csrk = hex("505E42DF 9691EC72 D31FCDFB EB641B61")
        let pdu = hex("d2120013 37 01000000 F1871E93 3C900FF2")
        #expect(SecurityToolbox.verifySignature(csrk: csrk, signedMessage: pdu) == 1)
        for i in pdu.indices {
            var bad = pdu
            bad[i] ^= 0x01
            #expect(SecurityToolbox.verifySignature(csrk: csrk, signedMessage: bad) == nil, "octet \(i) changed")
        }
        var otherKey = csrk
        otherKey[0] ^= 0x80
        #expect(SecurityToolbox.verifySignature(csrk: otherKey, signedMessage: pdu) == nil)
        #expect(SecurityToolbox.verifySignature(csrk: csrk, signedMessage: Array(pdu.prefix(11))) == nil)
        #expect(SecurityToolbox.verifySignature(csrk: [1, 2, 3], signedMessage: pdu) == nil)
    }
}
